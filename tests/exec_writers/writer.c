/*
 * writer: a tiny "trainer" for the `zerosim exec` tests.
 *
 * It advances one 64-bit state value per step and checkpoints it to DIR/state, through one
 * of several save protocols (correct, no_dir_fsync, in_place) and one of several system-call
 * paths (glibc wrappers, raw syscall(2), a shared mapping, io_uring), in the process itself,
 * (uring-idle: an io_uring that submits only a NOP beside glibc writes, as an event loop's ring
 * does; uring-sqpoll: the same with a SQPOLL ring)
 * in a forked child or in a fork+exec'd child. The tests use it to prove that the tracer sees
 * every one of those paths.
 *
 *   writer --dir D --steps N --save-every K --protocol P --io IO [--save-in self|fork|exec]
 *   writer --save-only --dir D --protocol P --io IO --step S --value HEX16
 *
 * Exit status: 0 done; 1 corrupt checkpoint; 2 a failed system call or bad usage;
 * 77 io_uring unavailable (--io uring, uring-idle, uring-sqpoll only).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/io_uring.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define STATE_SIZE 4096
#define SEED UINT64_C(0x9e3779b97f4a7c15)
#define CHECK_SALT UINT64_C(0x5bd1e995)
#define PATH_CAP 4096

enum protocol { PROTO_CORRECT, PROTO_NO_DIR_FSYNC, PROTO_IN_PLACE };
enum io_path { IO_LIBC, IO_RAW, IO_MMAP, IO_URING, IO_URING_IDLE, IO_URING_SQPOLL };
enum save_in { SAVE_SELF, SAVE_FORK, SAVE_EXEC };

static enum protocol g_protocol;
static enum io_path g_io;
/* Set in a forked child that must leave with _exit (no atexit handlers, no stdio flush). */
static int g_in_child;

static void leave(int status) {
  if (g_in_child) _exit(status);
  exit(status);
}

/* `writer: <what> <path>: <strerror(err)>` and exit 2. */
static void fail_errno(const char *what, const char *path, int err) {
  fprintf(stderr, "writer: %s %s: %s\n", what, path, strerror(err));
  leave(2);
}

static void fail_msg(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("writer: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  leave(status);
}

static uint64_t splitmix64(uint64_t x) {
  x += UINT64_C(0x9e3779b97f4a7c15);
  x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

static uint64_t state_check(uint64_t step, uint64_t value) {
  return splitmix64(value ^ step ^ CHECK_SALT);
}

/* ---- The file operations, issued through glibc wrappers or raw syscall(2). -------------- */

static int raw_path(void) { return g_io == IO_RAW; }

static int op_open(const char *path, int flags, mode_t mode) {
  int fd;
  if (raw_path()) {
    fd = (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
  } else {
    fd = open(path, flags, mode);
  }
  return fd;
}

static int op_open_checked(const char *path, int flags, mode_t mode) {
  int fd = op_open(path, flags, mode);
  if (fd < 0) fail_errno("open", path, errno);
  return fd;
}

static void op_close(int fd, const char *path) {
  int rc = raw_path() ? (int)syscall(SYS_close, fd) : close(fd);
  if (rc != 0) fail_errno("close", path, errno);
}

static void op_fsync(int fd, const char *path) {
  int rc = raw_path() ? (int)syscall(SYS_fsync, fd) : fsync(fd);
  if (rc != 0) fail_errno("fsync", path, errno);
}

/* Writes all of buf in one write call; a short write is a failure (EIO). */
static void op_write_all(int fd, const void *buf, size_t len, const char *path) {
  ssize_t n = raw_path() ? (ssize_t)syscall(SYS_write, fd, buf, len) : write(fd, buf, len);
  if (n < 0) fail_errno("write", path, errno);
  if ((size_t)n != len) {
    fail_msg(2, "write %s: short write (%zd of %zu bytes)", path, n, len);
  }
}

static void op_rename(const char *from, const char *to) {
  int rc;
  if (raw_path()) {
    rc = (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 0);
  } else {
    rc = rename(from, to);
  }
  if (rc != 0) {
    int err = errno;
    char both[2 * PATH_CAP + 8];
    snprintf(both, sizeof both, "%s -> %s", from, to);
    fail_errno("rename", both, err);
  }
}

static int op_mkdir(const char *path, mode_t mode) {
  if (raw_path()) return (int)syscall(SYS_mkdirat, AT_FDCWD, path, mode);
  return mkdir(path, mode);
}

static int op_stat(const char *path, struct stat *st) {
  if (raw_path()) return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, 0);
  return stat(path, st);
}

static int op_fstat(int fd, struct stat *st) {
  if (raw_path()) return (int)syscall(SYS_fstat, fd, st);
  return fstat(fd, st);
}

static ssize_t op_read(int fd, void *buf, size_t len) {
  if (raw_path()) return (ssize_t)syscall(SYS_read, fd, buf, len);
  return read(fd, buf, len);
}

static void fsync_dir(const char *dir) {
  int fd = op_open_checked(dir, O_RDONLY | O_DIRECTORY, 0);
  op_fsync(fd, dir);
  op_close(fd, dir);
}

/* ---- Paths. ---------------------------------------------------------------------------- */

static void join_path(char *out, const char *dir, const char *name) {
  int n = snprintf(out, PATH_CAP, "%s/%s", dir, name);
  if (n < 0 || n >= PATH_CAP) fail_errno("path", dir, ENAMETOOLONG);
}

/* The directory that holds `dir` (its trailing slashes ignored): "." for a bare name. */
static void parent_of(const char *dir, char *out) {
  size_t len = strlen(dir);
  if (len >= PATH_CAP) fail_errno("path", dir, ENAMETOOLONG);
  while (len > 1 && dir[len - 1] == '/') --len;
  while (len > 0 && dir[len - 1] != '/') --len;  /* drop the last component */
  if (len == 0) {
    strcpy(out, ".");
    return;
  }
  while (len > 1 && dir[len - 1] == '/') --len;  /* and the slashes before it */
  memcpy(out, dir, len);
  out[len] = '\0';
}

/* mkdir `dir` if it does not exist yet, then fsync its parent so the new entry is durable. */
static void ensure_dir(const char *dir) {
  struct stat st;
  if (op_stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) fail_errno("mkdir", dir, ENOTDIR);
    return;
  }
  if (errno != ENOENT) fail_errno("stat", dir, errno);
  if (op_mkdir(dir, 0755) != 0) fail_errno("mkdir", dir, errno);
  char parent[PATH_CAP];
  parent_of(dir, parent);
  fsync_dir(parent);
}

/* ---- The checkpoint image. ------------------------------------------------------------- */

static int format_header(char *out, size_t cap, uint64_t step, uint64_t value) {
  return snprintf(out, cap, "zerosim-writer step=%" PRIu64 " value=%016" PRIx64 " check=%016" PRIx64 "\n",
                  step, value, state_check(step, value));
}

static void build_image(unsigned char *image, uint64_t step, uint64_t value) {
  memset(image, 0, STATE_SIZE);
  format_header((char *)image, STATE_SIZE, step, value);
}

/* Parses exactly 16 lowercase hex digits. */
static int parse_hex16(const char *s, uint64_t *out) {
  uint64_t v = 0;
  for (int i = 0; i < 16; ++i) {
    char c = s[i];
    unsigned d;
    if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
    else return 0;
    v = (v << 4) | d;
  }
  *out = v;
  return 1;
}

/* Decimal without sign or leading zeros (except "0"); advances *s past the digits. */
static int parse_u64_prefix(const char **s, uint64_t *out) {
  const char *p = *s;
  uint64_t v = 0;
  if (*p < '0' || *p > '9') return 0;
  if (p[0] == '0' && p[1] >= '0' && p[1] <= '9') return 0;
  while (*p >= '0' && *p <= '9') {
    unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return 0;
    v = v * 10 + d;
    ++p;
  }
  *s = p;
  *out = v;
  return 1;
}

/* Validates a 4096-byte image; on failure returns 0 with *reason set. */
static int parse_image(const unsigned char *image, uint64_t *step, uint64_t *value, const char **reason) {
  static const char prefix[] = "zerosim-writer step=";
  const char *p = (const char *)image;
  const char *end_of_line = memchr(image, '\n', STATE_SIZE);
  if (end_of_line == NULL) {
    *reason = "no header line";
    return 0;
  }
  if (strncmp(p, prefix, sizeof prefix - 1) != 0) {
    *reason = "bad header";
    return 0;
  }
  p += sizeof prefix - 1;
  uint64_t s, v, check;
  if (!parse_u64_prefix(&p, &s) || strncmp(p, " value=", 7) != 0 || !parse_hex16(p + 7, &v) ||
      strncmp(p + 23, " check=", 7) != 0 || !parse_hex16(p + 30, &check) || p + 46 != end_of_line) {
    *reason = "bad header";
    return 0;
  }
  if (check != state_check(s, v)) {
    *reason = "check mismatch";
    return 0;
  }
  size_t header_len = (size_t)(end_of_line - (const char *)image) + 1;
  for (size_t i = header_len; i < STATE_SIZE; ++i) {
    if (image[i] != 0) {
      *reason = "nonzero padding";
      return 0;
    }
  }
  *step = s;
  *value = v;
  return 1;
}

/* Loads DIR/state: 0 when it does not exist, 1 when loaded; exits 1 when corrupt. */
static int load_state(const char *dir, uint64_t *step, uint64_t *value) {
  char path[PATH_CAP];
  join_path(path, dir, "state");
  int fd = op_open(path, O_RDONLY, 0);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    fail_errno("open", path, errno);
  }
  struct stat st;
  if (op_fstat(fd, &st) != 0) fail_errno("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) fail_msg(1, "%s: corrupt checkpoint (not a regular file)", path);
  if (st.st_size != STATE_SIZE) {
    fail_msg(1, "%s: corrupt checkpoint (size %jd bytes, expected %d)", path, (intmax_t)st.st_size,
             STATE_SIZE);
  }
  static unsigned char image[STATE_SIZE];
  size_t got = 0;
  while (got < STATE_SIZE) {
    ssize_t n = op_read(fd, image + got, STATE_SIZE - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("read", path, errno);
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  op_close(fd, path);
  if (got != STATE_SIZE) {
    fail_msg(1, "%s: corrupt checkpoint (read %zu bytes, expected %d)", path, got, STATE_SIZE);
  }
  const char *reason = NULL;
  if (!parse_image(image, step, value, &reason)) {
    fail_msg(1, "%s: corrupt checkpoint (%s)", path, reason);
  }
  return 1;
}

/* ---- io_uring: one submission (a WRITE, or a NOP) through raw syscalls and the ring mappings. */

static void uring_submit(uint8_t opcode, uint32_t setup_flags, int fd, const void *buf, size_t len, const char *path) {
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  params.flags = setup_flags;
  int ring = (int)syscall(__NR_io_uring_setup, 4u, &params);
  if (ring < 0) {
    fail_msg(77, "io_uring unavailable: %s", strerror(errno));
  }

  size_t sq_size = params.sq_off.array + params.sq_entries * sizeof(uint32_t);
  size_t cq_size = params.cq_off.cqes + params.cq_entries * sizeof(struct io_uring_cqe);
  int single = (params.features & IORING_FEAT_SINGLE_MMAP) != 0;
  if (single) {
    if (cq_size > sq_size) sq_size = cq_size;
    cq_size = sq_size;
  }
  unsigned char *sq_ptr =
      mmap(NULL, sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
  if (sq_ptr == MAP_FAILED) fail_errno("mmap io_uring sq ring for", path, errno);
  unsigned char *cq_ptr = sq_ptr;
  if (!single) {
    cq_ptr = mmap(NULL, cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                  IORING_OFF_CQ_RING);
    if (cq_ptr == MAP_FAILED) fail_errno("mmap io_uring cq ring for", path, errno);
  }
  size_t sqes_size = params.sq_entries * sizeof(struct io_uring_sqe);
  struct io_uring_sqe *sqes =
      mmap(NULL, sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
  if (sqes == MAP_FAILED) fail_errno("mmap io_uring sqes for", path, errno);

  _Atomic uint32_t *sq_tail = (_Atomic uint32_t *)(sq_ptr + params.sq_off.tail);
  uint32_t sq_mask = *(uint32_t *)(sq_ptr + params.sq_off.ring_mask);
  uint32_t *sq_array = (uint32_t *)(sq_ptr + params.sq_off.array);
  _Atomic uint32_t *cq_head = (_Atomic uint32_t *)(cq_ptr + params.cq_off.head);
  _Atomic uint32_t *cq_tail = (_Atomic uint32_t *)(cq_ptr + params.cq_off.tail);
  uint32_t cq_mask = *(uint32_t *)(cq_ptr + params.cq_off.ring_mask);
  struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq_ptr + params.cq_off.cqes);

  uint32_t tail = atomic_load_explicit(sq_tail, memory_order_relaxed);
  uint32_t index = tail & sq_mask;
  struct io_uring_sqe *sqe = &sqes[index];
  memset(sqe, 0, sizeof *sqe);
  sqe->opcode = opcode;
  sqe->fd = opcode == IORING_OP_NOP ? -1 : fd;
  sqe->addr = opcode == IORING_OP_NOP ? 0 : (uint64_t)(uintptr_t)buf;
  sqe->len = opcode == IORING_OP_NOP ? 0 : (uint32_t)len;
  sqe->off = 0;
  sqe->user_data = 0x5a5a;
  sq_array[index] = index;
  atomic_store_explicit(sq_tail, tail + 1, memory_order_release);

  for (;;) {
    /* A SQPOLL ring's kernel thread may sleep: the enter wakes it. */
    unsigned enter_flags = IORING_ENTER_GETEVENTS | ((setup_flags & IORING_SETUP_SQPOLL) ? IORING_ENTER_SQ_WAKEUP : 0u);
    long submitted = syscall(__NR_io_uring_enter, ring, 1u, 1u, enter_flags, NULL, (size_t)0);
    if (submitted < 0) {
      if (errno == EINTR) continue;
      fail_errno("io_uring_enter", path, errno);
    }
    if (submitted != 1) fail_msg(2, "io_uring_enter %s: submitted %ld of 1", path, submitted);
    break;
  }

  uint32_t head = atomic_load_explicit(cq_head, memory_order_relaxed);
  while (head == atomic_load_explicit(cq_tail, memory_order_acquire)) {
    /* GETEVENTS with min_complete 1 returned, so the completion is there; wait defensively. */
    long rc = syscall(__NR_io_uring_enter, ring, 0u, 1u, IORING_ENTER_GETEVENTS, NULL, (size_t)0);
    if (rc < 0 && errno != EINTR) fail_errno("io_uring_enter", path, errno);
  }
  struct io_uring_cqe *cqe = &cqes[head & cq_mask];
  int32_t res = cqe->res;
  atomic_store_explicit(cq_head, head + 1, memory_order_release);

  if (res < 0) fail_errno("io_uring submission", path, -res);
  if (opcode == IORING_OP_WRITE && (size_t)res != len)
    fail_msg(2, "io_uring write %s: short write (%d of %zu bytes)", path, res, len);

  if (munmap(sqes, sqes_size) != 0) fail_errno("munmap io_uring sqes for", path, errno);
  if (!single && munmap(cq_ptr, cq_size) != 0) fail_errno("munmap io_uring cq ring for", path, errno);
  if (munmap(sq_ptr, sq_size) != 0) fail_errno("munmap io_uring sq ring for", path, errno);
  if (close(ring) != 0) fail_errno("close io_uring for", path, errno);
}

/* ---- A save. --------------------------------------------------------------------------- */

/* Writes the image to `path` (created or truncated) through the chosen I/O path; fsyncs it
 * (msync for mmap) when `durable`. */
static void write_file(const char *path, const unsigned char *image, int durable) {
  if (g_io == IO_MMAP) {
    int fd = op_open_checked(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (ftruncate(fd, STATE_SIZE) != 0) fail_errno("ftruncate", path, errno);
    void *map = mmap(NULL, STATE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) fail_errno("mmap", path, errno);
    memcpy(map, image, STATE_SIZE);
    if (durable && msync(map, STATE_SIZE, MS_SYNC) != 0) fail_errno("msync", path, errno);
    if (munmap(map, STATE_SIZE) != 0) fail_errno("munmap", path, errno);
    op_close(fd, path);
    return;
  }
  int fd = op_open_checked(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (g_io == IO_URING) {
    uring_submit(IORING_OP_WRITE, 0, fd, image, STATE_SIZE, path);
  } else if (g_io == IO_URING_IDLE || g_io == IO_URING_SQPOLL) {
    uring_submit(IORING_OP_NOP, g_io == IO_URING_SQPOLL ? IORING_SETUP_SQPOLL : 0, fd, image, STATE_SIZE, path);
    op_write_all(fd, image, STATE_SIZE, path);
  } else {
    op_write_all(fd, image, STATE_SIZE, path);
  }
  if (durable) op_fsync(fd, path);
  op_close(fd, path);
}

static void save_checkpoint(const char *dir, uint64_t step, uint64_t value) {
  static unsigned char image[STATE_SIZE];
  build_image(image, step, value);
  char state_path[PATH_CAP];
  char tmp_path[PATH_CAP];
  join_path(state_path, dir, "state");
  join_path(tmp_path, dir, "state.tmp");

  ensure_dir(dir);
  switch (g_protocol) {
    case PROTO_CORRECT:
    case PROTO_NO_DIR_FSYNC:
      write_file(tmp_path, image, 1);
      op_rename(tmp_path, state_path);
      if (g_protocol == PROTO_CORRECT) fsync_dir(dir);
      break;
    case PROTO_IN_PLACE:
      write_file(state_path, image, 0);
      break;
  }
}

/* ---- Command line. --------------------------------------------------------------------- */

static const char *protocol_name(enum protocol p) {
  switch (p) {
    case PROTO_CORRECT: return "correct";
    case PROTO_NO_DIR_FSYNC: return "no_dir_fsync";
    case PROTO_IN_PLACE: return "in_place";
  }
  return "?";
}

static const char *io_name(enum io_path io) {
  switch (io) {
    case IO_LIBC: return "libc";
    case IO_RAW: return "raw";
    case IO_MMAP: return "mmap";
    case IO_URING: return "uring";
    case IO_URING_IDLE: return "uring-idle";
    case IO_URING_SQPOLL: return "uring-sqpoll";
  }
  return "?";
}

static void usage(const char *problem) {
  fprintf(stderr,
          "writer: %s\n"
          "usage: writer --dir D --steps N --save-every K --protocol correct|no_dir_fsync|in_place\n"
          "              --io libc|raw|mmap|uring|uring-idle|uring-sqpoll [--save-in self|fork|exec]\n"
          "       writer --save-only --dir D --protocol P --io IO --step S --value HEX16\n",
          problem);
  exit(2);
}

static uint64_t parse_count(const char *option, const char *text) {
  const char *p = text;
  uint64_t v;
  if (!parse_u64_prefix(&p, &v) || *p != '\0') {
    char message[256];
    snprintf(message, sizeof message, "%s: not a non-negative integer: %s", option, text);
    usage(message);
  }
  return v;
}

struct options {
  const char *dir;
  int has_steps, has_save_every, has_protocol, has_io, has_step, has_value;
  uint64_t steps, save_every, step, value;
  enum save_in save_in;
  int save_only;
};

static void parse_args(int argc, char **argv, struct options *o) {
  memset(o, 0, sizeof *o);
  o->save_in = SAVE_SELF;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (strcmp(arg, "--save-only") == 0) {
      o->save_only = 1;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0) {
      char message[256];
      snprintf(message, sizeof message, "unexpected argument: %s", arg);
      usage(message);
    }
    /* --name VALUE or --name=VALUE */
    char name[64];
    const char *value;
    const char *eq = strchr(arg, '=');
    if (eq != NULL) {
      size_t n = (size_t)(eq - arg);
      if (n >= sizeof name) usage("option name too long");
      memcpy(name, arg, n);
      name[n] = '\0';
      value = eq + 1;
    } else {
      if (strlen(arg) >= sizeof name) usage("option name too long");
      strcpy(name, arg);
      if (i + 1 >= argc) {
        char message[128];
        snprintf(message, sizeof message, "%s needs a value", name);
        usage(message);
      }
      value = argv[++i];
    }
    if (strcmp(name, "--dir") == 0) {
      if (value[0] == '\0') usage("--dir is empty");
      o->dir = value;
    } else if (strcmp(name, "--steps") == 0) {
      o->steps = parse_count(name, value);
      o->has_steps = 1;
    } else if (strcmp(name, "--save-every") == 0) {
      o->save_every = parse_count(name, value);
      o->has_save_every = 1;
    } else if (strcmp(name, "--step") == 0) {
      o->step = parse_count(name, value);
      o->has_step = 1;
    } else if (strcmp(name, "--value") == 0) {
      if (strlen(value) != 16 || !parse_hex16(value, &o->value)) usage("--value needs 16 lowercase hex digits");
      o->has_value = 1;
    } else if (strcmp(name, "--protocol") == 0) {
      if (strcmp(value, "correct") == 0) g_protocol = PROTO_CORRECT;
      else if (strcmp(value, "no_dir_fsync") == 0) g_protocol = PROTO_NO_DIR_FSYNC;
      else if (strcmp(value, "in_place") == 0) g_protocol = PROTO_IN_PLACE;
      else usage("--protocol must be correct, no_dir_fsync or in_place");
      o->has_protocol = 1;
    } else if (strcmp(name, "--io") == 0) {
      if (strcmp(value, "libc") == 0) g_io = IO_LIBC;
      else if (strcmp(value, "raw") == 0) g_io = IO_RAW;
      else if (strcmp(value, "mmap") == 0) g_io = IO_MMAP;
      else if (strcmp(value, "uring") == 0) g_io = IO_URING;
      else if (strcmp(value, "uring-idle") == 0) g_io = IO_URING_IDLE;
      else if (strcmp(value, "uring-sqpoll") == 0) g_io = IO_URING_SQPOLL;
      else usage("--io must be libc, raw, mmap, uring, uring-idle or uring-sqpoll");
      o->has_io = 1;
    } else if (strcmp(name, "--save-in") == 0) {
      if (strcmp(value, "self") == 0) o->save_in = SAVE_SELF;
      else if (strcmp(value, "fork") == 0) o->save_in = SAVE_FORK;
      else if (strcmp(value, "exec") == 0) o->save_in = SAVE_EXEC;
      else usage("--save-in must be self, fork or exec");
    } else {
      char message[128];
      snprintf(message, sizeof message, "unknown option: %s", name);
      usage(message);
    }
  }
  if (o->dir == NULL) usage("--dir is required");
  if (!o->has_protocol) usage("--protocol is required");
  if (!o->has_io) usage("--io is required");
  if (o->save_only) {
    if (!o->has_step || !o->has_value) usage("--save-only needs --step and --value");
  } else {
    if (!o->has_steps) usage("--steps is required");
    if (!o->has_save_every) usage("--save-every is required");
    if (o->save_every == 0) usage("--save-every must be at least 1");
  }
}

/* ---- Saving in a child. ---------------------------------------------------------------- */

static void wait_child(pid_t pid, const char *what, const char *path) {
  int status;
  for (;;) {
    pid_t r = waitpid(pid, &status, 0);
    if (r == pid) break;
    if (r < 0 && errno == EINTR) continue;
    fail_errno("waitpid", path, errno);
  }
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code == 0) return;
    if (code == 77) leave(77);  /* io_uring unavailable: pass the skip on. */
    fail_msg(2, "%s %s: child exited with status %d", what, path, code);
  }
  if (WIFSIGNALED(status)) fail_msg(2, "%s %s: child killed by signal %d", what, path, WTERMSIG(status));
  fail_msg(2, "%s %s: child ended with wait status %#x", what, path, (unsigned)status);
}

static void save_in_fork(const char *dir, uint64_t step, uint64_t value) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) fail_errno("fork", dir, errno);
  if (pid == 0) {
    g_in_child = 1;
    save_checkpoint(dir, step, value);
    _exit(0);
  }
  wait_child(pid, "fork save", dir);
}

static void save_in_exec(const char *argv0, const char *dir, uint64_t step, uint64_t value) {
  char step_text[32];
  char value_text[32];
  snprintf(step_text, sizeof step_text, "%" PRIu64, step);
  snprintf(value_text, sizeof value_text, "%016" PRIx64, value);
  char *args[] = {
      (char *)argv0, "--save-only", "--dir", (char *)dir, "--protocol", (char *)protocol_name(g_protocol),
      "--io", (char *)io_name(g_io), "--step", step_text, "--value", value_text, NULL,
  };
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) fail_errno("fork", dir, errno);
  if (pid == 0) {
    g_in_child = 1;
    execv("/proc/self/exe", args);
    fail_errno("execv", "/proc/self/exe", errno);
  }
  wait_child(pid, "exec save", dir);
}

/* ---- The state log. -------------------------------------------------------------------- */

static void log_step(int fd, const char *path, uint64_t step, uint64_t value, int checkpoint) {
  char line[256];
  double loss = (double)(value >> 11) * 0x1.0p-53;
  int n = snprintf(line, sizeof line,
                   "{\"step\": %" PRIu64 ", \"loss\": %.17g, \"components\": {\"value\": \"%016" PRIx64
                   "\"}, \"checkpoint\": %s}\n",
                   step, loss, value, checkpoint ? "true" : "false");
  if (n < 0 || (size_t)n >= sizeof line) fail_msg(2, "format state log line: too long");
  op_write_all(fd, line, (size_t)n, path);
}

int main(int argc, char **argv) {
  struct options o;
  parse_args(argc, argv, &o);

  if (o.save_only) {
    save_checkpoint(o.dir, o.step, o.value);
    return 0;
  }

  uint64_t step = 0;
  uint64_t value = SEED;
  load_state(o.dir, &step, &value);

  const char *log_path = getenv("ZEROSIM_STATE_LOG");
  int log_fd = -1;
  if (log_path != NULL && log_path[0] != '\0') {
    log_fd = op_open_checked(log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  }

  for (uint64_t s = step + 1; s <= o.steps; ++s) {
    value = splitmix64(value ^ s);
    int save = (s % o.save_every) == 0;
    if (save) {
      switch (o.save_in) {
        case SAVE_SELF: save_checkpoint(o.dir, s, value); break;
        case SAVE_FORK: save_in_fork(o.dir, s, value); break;
        case SAVE_EXEC: save_in_exec(argv[0], o.dir, s, value); break;
      }
    }
    if (log_fd >= 0) log_step(log_fd, log_path, s, value, save);
  }

  if (log_fd >= 0) op_close(log_fd, log_path);
  return 0;
}
