/*
 * deny_unshare PROGRAM ARGS...
 *
 * Runs PROGRAM under a seccomp-BPF filter that makes the `unshare` and `mount` system calls
 * fail with EPERM, as in a container where namespaces are not permitted. Everything else is
 * allowed (x32 system calls are refused with EPERM too); a system call of any architecture
 * other than x86_64 kills the process. The filter is inherited by PROGRAM and its children.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: deny_unshare PROGRAM ARGS...\n");
    return 2;
  }

  struct sock_filter filter[] = {
      /* Only x86_64 system calls are judged; anything else is killed. */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      /* x32 numbers (which would reach unshare/mount by another number): refused. */
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unshare, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mount, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {
      .len = (unsigned short)(sizeof filter / sizeof filter[0]),
      .filter = filter,
  };

  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    fprintf(stderr, "deny_unshare: prctl(PR_SET_NO_NEW_PRIVS): %s\n", strerror(errno));
    return 2;
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0) {
    fprintf(stderr, "deny_unshare: prctl(PR_SET_SECCOMP): %s\n", strerror(errno));
    return 2;
  }
  execvp(argv[1], argv + 1);
  fprintf(stderr, "deny_unshare: execvp %s: %s\n", argv[1], strerror(errno));
  return 127;
}
