package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// A server that cannot bind its ports is not taken for started, even when
// something else accepts connections there: the port's holder here is a
// listener that accepts and never answers, as another program would.
func TestStartRequiresItsOwnProcessToAnswer(t *testing.T) {
	requireBinary(t)
	hold := func(t *testing.T, port int) {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Skipf("port %d: %v", port, err)
		}
		accepted := make(chan struct{})
		t.Cleanup(func() { _ = l.Close(); <-accepted })
		go func() { // holds what it accepts, until the listener closes
			defer close(accepted)
			var conns []net.Conn
			for {
				c, err := l.Accept()
				if err != nil {
					for _, c := range conns {
						_ = c.Close()
					}
					return
				}
				conns = append(conns, c)
			}
		}()
	}
	clusterArgs := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}
	for _, c := range []struct {
		name string
		args []string
		busy func(port int) int
	}{
		{"client port taken", nil, func(port int) int { return port }},
		{"cluster bus port taken", clusterArgs, func(port int) int { return port + 10000 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := freePort(true)
			if port == 0 {
				t.Skip("no free port pair")
			}
			hold(t, c.busy(port))
			s := &Server{t: t, dir: t.TempDir(), args: c.args, Port: port}
			err := s.start()
			if err == nil {
				s.Stop()
				t.Fatalf("start on %d succeeded with port %d held by another listener", port, c.busy(port))
			}
			if !strings.Contains(err.Error(), "exited at once") {
				t.Errorf("start: %v, want the server's own exit", err)
			}
		})
	}
	t.Run("free ports", func(t *testing.T) {
		s := &Server{t: t, dir: t.TempDir(), args: clusterArgs}
		if err := s.startOnFreePort(true); err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		if s.Port+10000 >= ephemeralStart {
			t.Errorf("bus port %d inside the ephemeral range (from %d)", s.Port+10000, ephemeralStart)
		}
		if pid, err := serverPID(s.Addr()); err != nil || pid != s.cmd.Process.Pid {
			t.Errorf("INFO's process_id %d (%v), want %d", pid, err, s.cmd.Process.Pid)
		}
	})
}
