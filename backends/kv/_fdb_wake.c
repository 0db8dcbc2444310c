/* libfdb_c's FDBCallback for futures a thread or an event loop waits on, and the read of the
 * pipe it writes to (backends/kv/fdb_wake.py).
 *
 * libfdb_c calls a future's callback on its network thread. A callback written in Python
 * must take the GIL there, so every reply waits for the thread that holds it to let go.
 * This one runs no Python: it writes the registration's slot (4 bytes) to the pipe of the
 * waiter, which reads its pipe when it is readable. The parameter carries both: the pipe's
 * write end in its high 32 bits, the slot in the low 32.
 *
 * Plain C, no Python API: loaded with ctypes, never imported. A write of 4 bytes to a pipe
 * is atomic; a waiter never registers more slots than its pipe holds, so it never blocks. */

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <unistd.h>

void aos_fdb_wake(void *future, void *parameter) {
    (void)future;
    uint64_t word = (uint64_t)(uintptr_t)parameter;
    int fd = (int)(word >> 32);
    uint32_t slot = (uint32_t)(word & 0xffffffffu);
    ssize_t written;
    do {
        written = write(fd, &slot, sizeof slot);
    } while (written < 0 && errno == EINTR);
}

/* Read the slots written to the pipe `fd` (its read end non-blocking) into `slots`, after
 * the `*count` already there and at most up to `capacity`, waiting up to `timeout_ms` for
 * the first (the GIL released: ctypes lets go of it). `*count` is advanced here, before
 * returning, so that no slot read is lost to what the caller's thread runs next (a
 * signal's handler, which may raise). Returns how many slots were read: 0 when none came
 * in time or a signal interrupted the wait; -errno on an error. */
int aos_fdb_wake_read(int fd, uint32_t *slots, uint32_t *count, uint32_t capacity,
                      int timeout_ms) {
    if (*count >= capacity) {
        return 0;
    }
    struct pollfd readable = {fd, POLLIN, 0};
    int ready = poll(&readable, 1, timeout_ms);
    if (ready <= 0) {
        return ready == 0 || errno == EINTR ? 0 : -errno;
    }
    unsigned char *into = (unsigned char *)(slots + *count);
    size_t room = (size_t)(capacity - *count) * sizeof *slots;
    ssize_t got = read(fd, into, room);
    if (got < 0) {
        return errno == EINTR || errno == EAGAIN ? 0 : -errno;
    }
    size_t have = (size_t)got;
    while (have % sizeof *slots != 0) {
        /* whole slots were asked for, and each was written at once: the rest is there
         * (if it is not, the pipe is broken: an error, never a spin) */
        ssize_t more = read(fd, into + have, sizeof *slots - have % sizeof *slots);
        if (more > 0) {
            have += (size_t)more;
        } else if (more == 0 || errno != EINTR) {
            return more == 0 ? -EIO : -errno;
        }
    }
    *count += (uint32_t)(have / sizeof *slots);
    return (int)(have / sizeof *slots);
}
