//go:build linux && (arm64 || riscv64)

package boxfs

import "syscall"

const sysFstatat = syscall.SYS_FSTATAT
