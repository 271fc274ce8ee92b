//go:build linux && (amd64 || mips64 || mips64le || ppc64 || ppc64le || s390x)

package boxfs

import "syscall"

const sysFstatat = syscall.SYS_NEWFSTATAT
