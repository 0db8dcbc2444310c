/* libfdb_c's FDBCallback for futures an asyncio event loop awaits (backends/kv/fdb_wake.py).
 *
 * libfdb_c calls a future's callback on its network thread. A callback written in Python
 * must take the GIL there, so every reply waits for the event loop's thread to let go of
 * it. This one runs no Python: it writes the registration's slot (4 bytes) to the pipe of
 * the loop that waits, and the loop reads its pipe when it is readable. The parameter
 * carries both: the pipe's write end in its high 32 bits, the slot in the low 32.
 *
 * Plain C, no Python API: loaded with ctypes, never imported. A write of 4 bytes to a pipe
 * is atomic; the loop never registers more slots than its pipe holds, so it never blocks. */

#include <errno.h>
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
