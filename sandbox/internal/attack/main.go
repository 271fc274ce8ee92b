// Command attack is run by Paddock's adversarial tests inside a sandbox, as
// the job's user, to attack the sandbox's own control plane: it signals
// PID 1, tries to open init's descriptors, memory and executable, to ptrace
// it, to read its memory, to steal its descriptors through a pidfd, and to
// reach the control socket. Wherever it gets through, it writes forged and
// garbage protocol frames.
//
//	attack all    try everything; print one line per attack; exit with the
//	              number of attacks that got through (0: all refused)
//	attack hold   keep whatever of init's descriptors it can open, then
//	              sleep forever (the worker-death tests)
//
// It is a test tool: never part of a sandbox image.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

const (
	sysPidfdOpen      = 434
	sysPidfdGetfd     = 438
	sysProcessVMReadv = 310
)

// forged is an exit frame claiming success, as init would send it.
var forged = append([]byte{'X', 0, 0, 0, 29}, []byte(`{"id":1,"exit_code":0,"d":0} `)...)

var reached []string

func report(name string, err error, through bool) {
	switch {
	case through:
		reached = append(reached, name)
		fmt.Printf("%-28s REACHED\n", name)
	default:
		fmt.Printf("%-28s refused: %v\n", name, err)
	}
}

func main() {
	mode := "all"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	var held []*os.File
	signalInit()
	held = append(held, openInitFds()...)
	readInit()
	traceInit()
	held = append(held, stealInitFds()...)
	reachControlPlane()

	if mode == "hold" {
		fmt.Printf("holding %d descriptors of init\n", len(held))
		for {
			time.Sleep(time.Hour)
		}
	}
	if len(reached) == 0 {
		fmt.Println("reached: none")
	} else {
		fmt.Printf("reached: %v\n", reached)
	}
	os.Exit(len(reached))
}

// signalInit sends every signal to PID 1. kill(2) succeeds for the same
// uid; what counts is that init is still there afterwards.
func signalInit() {
	for s := 1; s <= 64; s++ {
		_ = syscall.Kill(1, syscall.Signal(s))
	}
	time.Sleep(50 * time.Millisecond)
	if err := syscall.Kill(1, 0); err != nil {
		report("init alive after signals", err, true) // init gone: that is a hit
	} else {
		report("signals 1-64 to PID 1", fmt.Errorf("init still running"), false)
	}
}

// openInitFds lists init's descriptors and opens each of the first 16 it
// can through /proc/1/fd, writing forged and garbage frames to those it
// opens for writing; it returns every one it opened.
func openInitFds() []*os.File {
	var held []*os.File
	_, err := os.ReadDir("/proc/1/fd")
	report("list /proc/1/fd", err, err == nil)
	for fd := 0; fd < 16; fd++ {
		p := "/proc/1/fd/" + strconv.Itoa(fd)
		for _, flag := range []int{os.O_WRONLY, os.O_RDONLY} {
			f, err := os.OpenFile(p, flag, 0)
			if err != nil {
				if fd < 3 {
					report("open "+p+flagName(flag), err, false)
				}
				continue
			}
			report("open "+p+flagName(flag), nil, true)
			if flag == os.O_WRONLY {
				_, _ = f.Write(forged)
				_, _ = f.Write([]byte("\xff\xff\xff\xff garbage"))
			}
			held = append(held, f)
		}
	}
	return held
}

// readInit tries to read init's memory, environment, maps and executable,
// and to resolve its working directory and root.
func readInit() {
	for _, p := range []string{"/proc/1/mem", "/proc/1/environ", "/proc/1/maps", "/proc/1/exe", "/proc/1/root/.paddock/init"} {
		f, err := os.Open(p)
		if err == nil {
			buf := make([]byte, 16)
			_, err = f.Read(buf)
			f.Close()
		}
		report("read "+p, err, err == nil)
	}
	for _, p := range []string{"/proc/1/cwd", "/proc/1/root"} {
		_, err := os.Readlink(p)
		report("readlink "+p, err, err == nil)
	}
}

// traceInit tries to ptrace init and to read its memory with
// process_vm_readv.
func traceInit() {
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, syscall.PTRACE_ATTACH, 1, 0, 0, 0, 0)
	report("ptrace attach PID 1", e, e == 0)
	_, _, e = syscall.Syscall6(syscall.SYS_PTRACE, 0x4206 /* PTRACE_SEIZE */, 1, 0, 0, 0, 0)
	report("ptrace seize PID 1", e, e == 0)

	var word uint64
	local := syscall.Iovec{Base: (*byte)(unsafe.Pointer(&word)), Len: 8}
	remote := struct {
		base uintptr
		len  uint64
	}{0x400000, 8}
	_, _, e = syscall.Syscall6(sysProcessVMReadv, 1, uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	report("process_vm_readv PID 1", e, e == 0)
}

// stealInitFds tries to copy init's first 16 descriptors through a pidfd,
// writes a forged frame to each it gets and returns them.
func stealInitFds() []*os.File {
	pidfd, _, e := syscall.Syscall(sysPidfdOpen, 1, 0, 0)
	if e != 0 {
		report("pidfd_open PID 1", e, false)
		return nil
	}
	var held []*os.File
	got := false
	var last error
	for fd := 0; fd < 16; fd++ {
		nfd, _, e := syscall.Syscall(sysPidfdGetfd, pidfd, uintptr(fd), 0)
		if e == 0 {
			got = true
			f := os.NewFile(nfd, "stolen")
			_, _ = f.Write(forged)
			held = append(held, f)
		} else {
			last = e
		}
	}
	report("pidfd_getfd init's fds", last, got)
	return held
}

// reachControlPlane tries to connect to the control socket and write a
// forged frame to it, to create a file in its directory and to open init's
// executable for writing.
func reachControlPlane() {
	for _, p := range []string{"/.paddock/ctl/init.sock"} {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err == nil {
			err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: p})
			if err == nil {
				_, _ = syscall.Write(fd, forged)
			}
		}
		report("connect "+p, err, err == nil)
	}
	f, err := os.Create("/.paddock/ctl/init.sock")
	if err == nil {
		f.Close()
	}
	report("create in /.paddock/ctl", err, err == nil)
	f, err = os.OpenFile("/.paddock/init", os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	report("write /.paddock/init", err, err == nil)
}

func flagName(flag int) string {
	if flag == os.O_WRONLY {
		return " (w)"
	}
	return " (r)"
}
