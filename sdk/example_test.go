package sdk_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"strings"
	"syscall"

	"switchyard/sdk"
)

// A node that upper-cases text, streaming it word by word when asked.
func ExampleNode() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	node, err := sdk.NewNode(sdk.NodeConfig{
		URL:            "ws://127.0.0.1:8800/ws/node",
		APIKey:         "gn_…",
		Name:           "upper-1",
		Capabilities:   []string{"upper"},
		MaxConcurrency: 4,
		Handler: sdk.HandlerFunc(func(ctx context.Context, t *sdk.Task, emit func(string) error) (sdk.Result, error) {
			out := strings.ToUpper(t.Content)
			for _, w := range strings.SplitAfter(out, " ") {
				if err := emit(w); err != nil { // a no-op unless t.Stream
					return sdk.Result{}, err
				}
			}
			return sdk.Result{Text: out}, nil
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := node.Run(ctx); err != nil { // nil on Ctrl-C
		log.Fatal(err)
	}
}

func ExampleClient_Stream() {
	c := sdk.NewClient("http://127.0.0.1:8800", "gn_…")
	res, err := c.Stream(context.Background(), sdk.Request{TaskType: "upper", Content: "hello there"},
		func(delta string) error {
			fmt.Print(delta)
			return nil
		})
	if err != nil {
		log.Fatal(err) // an *sdk.APIError for the server's refusals and failures
	}
	fmt.Println("\n", res.Status, res.ProcessingTimeMs, "ms on", res.NodeID)
}
