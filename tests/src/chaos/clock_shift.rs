//! Moving one Redis server's wall clock, for the clock-jump scenario.
//!
//! Redis expires keys by its wall clock (`gettimeofday`), so a clock that
//! jumps forward expires every key early: Redlock's model excludes this
//! (bounded drift), and the chaos suite shows the checker catching it.
//!
//! libfaketime is the usual tool, but it cannot run Debian's `redis-server`:
//! the server links jemalloc, whose initialisation calls `clock_gettime`
//! while libfaketime is still resolving symbols, and libfaketime gives up
//! ("Cannot recover from unexpected recursive calls to clock_gettime()";
//! libfaketime issues #130 and #478, unresolved). So the suite builds its
//! own tiny `LD_PRELOAD` library with the system C compiler: it overrides
//! `clock_gettime` (wall clocks only), `gettimeofday` and `time`, reads the
//! real time with the raw system call (no symbol lookup, no allocation),
//! and adds a shift in nanoseconds read from a file it maps into memory, so
//! the test can move the clock while the server runs. The monotonic clock
//! is left alone, as an NTP step would.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The library's source.
pub const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The shift, in nanoseconds, mapped from $REDLOCK_CLOCK_SHIFT_FILE. */
static volatile const int64_t *shift_ns;

__attribute__((constructor)) static void clock_shift_init(void) {
    const char *path = getenv("REDLOCK_CLOCK_SHIFT_FILE");
    if (!path) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void *map = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map != MAP_FAILED) shift_ns = map;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int rc = (int)syscall(SYS_clock_gettime, clock, ts);
    if (rc == 0 && shift_ns && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *shift_ns;
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
"#;

/// The environment variable naming the shift file.
pub const SHIFT_FILE_ENV: &str = "REDLOCK_CLOCK_SHIFT_FILE";

/// A built library and one shift file: the servers started with
/// [`env`](Self::env) see their wall clock moved by [`set`](Self::set).
#[derive(Debug)]
pub struct ClockShift {
    library: PathBuf,
    file: PathBuf,
}

impl ClockShift {
    /// Builds the library in `dir` with `cc` and creates a shift file of zero.
    ///
    /// Fails when no C compiler is installed (the scenario is then skipped).
    pub fn build(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let source = dir.join("clock_shift.c");
        let library = dir.join("libclockshift.so");
        fs::write(&source, SOURCE)?;
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let output = Command::new(&cc)
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(&source)
            .output()
            .map_err(|err| io::Error::new(err.kind(), format!("cannot run {cc}: {err}")))?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "{cc} failed to build the clock shim: {}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let file = dir.join("clock-shift");
        fs::write(&file, 0i64.to_ne_bytes())?;
        Ok(Self { library, file })
    }

    /// The environment for a server whose clock this shifts.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "LD_PRELOAD".to_owned(),
                self.library.to_string_lossy().into_owned(),
            ),
            (
                SHIFT_FILE_ENV.to_owned(),
                self.file.to_string_lossy().into_owned(),
            ),
        ]
    }

    /// Moves the wall clock of the servers by `shift` ahead of the real one,
    /// at once.
    pub fn set(&self, shift: Duration) -> io::Result<()> {
        let ns = i64::try_from(shift.as_nanos()).unwrap_or(i64::MAX);
        OpenOptions::new()
            .write(true)
            .open(&self.file)?
            .write_all_at(&ns.to_ne_bytes(), 0)
    }
}
