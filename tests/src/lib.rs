//! Test harness for real `redis-server` processes.
