package pgtest

import (
	"context"
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
