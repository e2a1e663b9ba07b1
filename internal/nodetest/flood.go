package nodetest

import (
	"encoding/json"
	"time"
)

// Flood sends up to n task_chunk messages with the same delta for taskID,
// as fast as the connection takes them, until stop is closed or a write
// fails (the server closed the socket). It returns how many it sent. One
// message is encoded once and sent n times, so the flood costs the test
// little beside the writes themselves. Safe from any goroutine.
func (n *Node) Flood(taskID, delta string, count int, stop <-chan struct{}) int {
	b, err := json.Marshal(map[string]any{
		"msg_id": "m", "msg_type": "task_chunk", "sender_id": "",
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"payload":   map[string]any{"task_id": taskID, "delta": delta},
	})
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	for i := 0; i < count; i++ {
		if i%256 == 0 {
			select {
			case <-stop:
				return i
			default:
			}
		}
		if err := n.SendRaw(b); err != nil {
			return i
		}
	}
	return count
}
