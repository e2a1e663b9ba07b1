package redistest

import "syscall"

// sysProcAttr makes a redis-server die with the test binary (a test killed
// by its timeout must leave none behind), in its own process group so a
// terminal's Ctrl-C reaches the test, which then stops it in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
