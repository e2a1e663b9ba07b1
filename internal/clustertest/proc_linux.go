package clustertest

import "syscall"

// sysProcAttr makes an instance die with the test process: a test binary
// killed by its timeout must not leave instances serving behind it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
