package nodetest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/coder/websocket"
)

// Flood sends up to n task_chunk messages with the same delta for taskID,
// as fast as the connection takes them, until stop is closed or a write
// fails (the server closed the socket). It returns how many it sent. One
// message is encoded once and sent n times, so the flood costs the test
// little beside the writes themselves. Safe from any goroutine.
//
// A write waits while the server reads slower than the flood: it ends when
// stop is closed (or after a minute), not after SendRaw's 5 s — a write
// that times out closes the connection, and on a loaded machine a server
// busy with the flood can leave one waiting that long.
func (n *Node) Flood(taskID, delta string, count int, stop <-chan struct{}) int {
	b, err := json.Marshal(map[string]any{
		"msg_id": "m", "msg_type": "task_chunk", "sender_id": "",
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"payload":   map[string]any{"task_id": taskID, "delta": delta},
	})
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for i := 0; i < count; i++ {
		if i%256 == 0 && ctx.Err() != nil {
			return i
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		err := n.Conn.Write(wctx, websocket.MessageText, b)
		wcancel()
		if err != nil {
			return i
		}
	}
	return count
}
