package main

import (
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"unsafe"
)

// reaper reaps the orphans that the kernel hands dlock when it is PID 1 of
// a PID namespace (a container's entrypoint) or a child subreaper: a
// process whose parent exits before it becomes dlock's child, and its
// zombie stays until dlock waits for it. Unreaped, zombies pile up while
// the command runs, and those left in the command's process group make it
// look alive to groupAlive after a lost lock. The command itself is left
// to os/exec's Wait, which must get its status: the reaper looks at an
// exited child before it reaps it, and never reaps the command's pid.
type reaper struct {
	sigchld chan os.Signal
	quit    chan struct{}
	done    chan struct{}

	mu     sync.Mutex // held while reaping, and while the command starts
	cmdPid int        // the command's, until os/exec's Wait has reaped it
}

// startReaper starts reaping orphans when dlock is PID 1 or a child
// subreaper; otherwise it returns nil (whose methods do nothing): orphans
// are another process's to reap then. stop ends it.
func startReaper() *reaper {
	if os.Getpid() != 1 && !isSubreaper() {
		return nil
	}
	r := &reaper{sigchld: make(chan os.Signal, 1), quit: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	go r.loop()
	return r
}

// isSubreaper reports whether dlock is a child subreaper
// (prctl(PR_SET_CHILD_SUBREAPER), which a parent may set before it
// executes dlock).
func isSubreaper() bool {
	const prGetChildSubreaper = 37
	var on int32
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetChildSubreaper, uintptr(unsafe.Pointer(&on)), 0)
	return errno == 0 && on != 0
}

func (r *reaper) loop() {
	defer close(r.done)
	r.reap() // orphans that ended before the notification began
	for {
		select {
		case <-r.sigchld: // one for any number of children, as SIGCHLD is
			r.reap()
		case <-r.quit:
			return
		}
	}
}

// reap waits for each child that has ended, but the command.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		pid := endedChild()
		if pid == 0 || pid == r.cmdPid {
			// The command's zombie hides the others from endedChild
			// until os/exec's Wait reaps it; commandReaped looks again.
			return
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got != pid || err != nil {
			return // cannot happen: nothing else reaps it
		}
	}
}

// siginfo is siginfo_t as waitid fills it for a child: the pid follows
// three int32s, at the alignment of the union that holds it (a pointer's).
type siginfo struct {
	signo, errno, code int32
	_                  [ptrSize/4 - 1]int32
	pid                int32
	_                  [128 - 12 - (ptrSize - 4) - 4]byte
}

const ptrSize = unsafe.Sizeof(uintptr(0))

// endedChild returns the pid of a child that has ended, without reaping
// it (waitid with WNOWAIT), or 0 when none has.
func endedChild() int {
	const pAll, wNowait = 0, 0x1000000
	var info siginfo
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info)),
		syscall.WEXITED|syscall.WNOHANG|wNowait, 0, 0)
	if errno != 0 {
		return 0 // ECHILD: no children at all
	}
	return int(info.pid)
}

// start starts cmd with the reaping paused, so that a command that ends at
// once is known as the command before the reaper looks, and left to
// os/exec's Wait.
func (r *reaper) start(cmd *exec.Cmd) error {
	if r == nil {
		return cmd.Start()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := cmd.Start()
	if err == nil {
		r.cmdPid = cmd.Process.Pid
	}
	return err
}

// commandReaped tells the reaper that os/exec's Wait has reaped the
// command, and reaps the orphans its zombie may have hidden.
func (r *reaper) commandReaped() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.cmdPid = 0
	r.mu.Unlock()
	r.reap()
}

// stop stops the reaping and waits for it to end.
func (r *reaper) stop() {
	if r == nil {
		return
	}
	signal.Stop(r.sigchld)
	close(r.quit)
	<-r.done
}
