//go:build !linux

package redistest

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's; the
// process group keeps a terminal's Ctrl-C for the test.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
