package sweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
)

// natsBaseline is the sweep's yardstick: an embedded nats-server on a
// random loopback port, Nodes echo workers subscribed in one queue group
// (each on its own connection, as each switchyard node has its own
// socket), and one client connection that every request shares. One
// connection is how nats.go is meant to be used: its requests are
// multiplexed over one reply subscription, so a single connection is the
// fastest client it has, and the baseline the switchyard modes are held
// to is the best NATS does, not a handicapped one.
type natsBaseline struct {
	srv     *server.Server
	workers []*nats.Conn
	client  *nats.Conn
	subject string
}

// natsClientNote says in the report how the baseline's client sends.
const natsClientNote = "one shared client connection (nc.RequestWithContext from each request's goroutine); each worker on its own connection, answering its messages one at a time (a nats.go subscription runs its callback serially)"

var _ target = (*natsBaseline)(nil)

// startNATS starts the server and the workers and connects the client.
func startNATS(workers int) (_ *natsBaseline, err error) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	b := &natsBaseline{srv: srv, subject: "loadtest.sweep.echo." + cluster.RandHex(4)}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("nats-server: not ready for connections after 10 s")
	}
	url := srv.ClientURL()
	for i := range workers {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("echo-%d", i)), nats.NoReconnect())
		if err != nil {
			return nil, fmt.Errorf("nats worker %d: %w", i, err)
		}
		b.workers = append(b.workers, nc)
		if _, err := nc.QueueSubscribe(b.subject, "echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			return nil, fmt.Errorf("nats worker %d: subscribe: %w", i, err)
		}
		// The subscription is on the server once Flush returns: no early
		// request finds no responders.
		if err := nc.Flush(); err != nil {
			return nil, fmt.Errorf("nats worker %d: %w", i, err)
		}
	}
	if b.client, err = nats.Connect(url, nats.Name("sweep-client"), nats.NoReconnect()); err != nil {
		return nil, fmt.Errorf("nats client: %w", err)
	}
	return b, nil
}

// do sends one request and waits for its echo until ctx ends.
func (b *natsBaseline) do(ctx context.Context, body string) (string, error) {
	m, err := b.client.RequestWithContext(ctx, b.subject, []byte(body))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return "", &answerError{Code: "no_responders", Message: err.Error()}
	case err != nil:
		return "", err
	}
	return string(m.Data), nil
}

// close disconnects everything and stops the server, waiting for it.
func (b *natsBaseline) close() {
	if b.client != nil {
		b.client.Close()
	}
	for _, nc := range b.workers {
		nc.Close()
	}
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}
