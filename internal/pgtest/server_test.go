package pgtest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The private server answers, stalls under Stop (a query on an open
// connection does not return), and answers again after Cont.
func TestServerStopCont(t *testing.T) {
	s := StartServer(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
	s.Stop()
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = conn.QueryRow(qctx, "SELECT 1").Scan(&one)
	cancel()
	if err == nil {
		t.Fatal("a query answered while the server was stopped")
	}
	s.Cont()
	conn2, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatalf("connect after Cont: %v", err)
	}
	defer conn2.Close(ctx)
	if err := conn2.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("SELECT 1 after Cont: %v", err)
	}
}

// A port drawn free may be taken before postgres binds it. The start tries
// another, and takes as started only its own server: here the first port
// drawn is another private server's, which accepts the connection while
// the new postgres exits, unable to bind.
func TestStartServerOnATakenPort(t *testing.T) {
	other := StartServer(t)
	otherPort, err := strconv.Atoi(other.URL[len("postgres://postgres@127.0.0.1:"):strings.LastIndexByte(other.URL, '/')])
	if err != nil {
		t.Fatalf("port of %s: %v", other.URL, err)
	}
	var drawn []int
	s := startServer(t, func() int {
		p := otherPort
		if len(drawn) > 0 {
			p = freePort(t)
		}
		drawn = append(drawn, p)
		return p
	})
	if len(drawn) != 2 {
		t.Fatalf("ports tried: %v, want the taken one, then another", drawn)
	}
	if s.URL == other.URL {
		t.Fatalf("the new server's URL is the other server's (%s)", s.URL)
	}
	mine, err := dataDirectory(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := dataDirectory(other.URL)
	if err != nil {
		t.Fatal(err)
	}
	if mine == theirs {
		t.Fatalf("both URLs reach the server of %s", mine)
	}
	// Stop must freeze the new server, not the other.
	s.Stop()
	if _, err := dataDirectory(other.URL); err != nil {
		t.Fatalf("the other server stopped with the new one: %v", err)
	}
	s.Cont()
}
