package sdk_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/switchyard-dev/switchyard/sdk"
)

// A node that upper-cases text, two tasks at a time, streaming word by word.
func ExampleNewNode() {
	node, err := sdk.NewNode(sdk.NodeConfig{
		URL:            "ws://127.0.0.1:8800/ws/node",
		APIKey:         "gn_…",
		Name:           "upper-1",
		Capabilities:   []string{"upper"},
		MaxConcurrency: 2,
		Handler: sdk.HandlerFunc(func(ctx context.Context, t *sdk.Task, emit func(string) error) (sdk.Result, error) {
			words := strings.Fields(strings.ToUpper(t.Content))
			for _, w := range words {
				if err := ctx.Err(); err != nil {
					return sdk.Result{}, err // cancelled: the client went away
				}
				if err := emit(w + " "); err != nil { // a no-op unless the task streams
					return sdk.Result{}, err
				}
			}
			return sdk.Result{Text: strings.Join(words, " ")}, nil
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	// Run reconnects by itself until ctx ends or the node is replaced.
	if err := node.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_Stream() {
	c := sdk.NewClient("http://127.0.0.1:8800", "gn_…")
	res, err := c.Stream(context.Background(), sdk.Request{TaskType: "upper", Content: "hello world"},
		func(delta string) error { fmt.Print(delta); return nil })
	if err != nil {
		log.Fatal(err) // an *sdk.APIError says why: its Code is e.g. "no_node_available"
	}
	fmt.Println("\nserved by", res.NodeID, "in", res.ProcessingTimeMs, "ms")
}
