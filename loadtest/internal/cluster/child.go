package cluster

import (
	"io"
	"os"
	"os/exec"
	"syscall"
)

// StartChild starts this binary with args as a child process of the load
// test (a fleet helper, the sweep's floor server): its stderr is the load
// test's, it is told to stop by the closing of its stdin, and it is killed
// if the load test ends first, whatever way it ends.
func StartChild(args ...string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout io.ReadCloser, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd = exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err = cmd.StdoutPipe()
	if err == nil {
		stdin, err = cmd.StdinPipe()
	}
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return cmd, stdin, stdout, nil
}
