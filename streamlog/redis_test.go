package streamlog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/streamlog"
	"github.com/switchyard-dev/switchyard/streamlog/streamlogtest"
)

// The suite on the shared Redis: each subtest in a namespace of its own
// (deleted when it ends); two Logs of one subtest share it, as two
// instances of a cluster do.
func TestRedis(t *testing.T) {
	redistest.Client(t)
	streamlogtest.Run(t, sharedFactory(func(t *testing.T) (redis.UniversalClient, string) {
		return redistest.Client(t), nsOf(t)
	}), true)
}

// The suite on a private 3-master Redis Cluster: each script touches the
// two keys of one hash tag, and the subscription that wakes readers is on
// one node while tasks live on all three.
func TestRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := c.Client(t)
	streamlogtest.Run(t, sharedFactory(func(t *testing.T) (redis.UniversalClient, string) {
		return rdb, nsOf(t)
	}), true)
}

// namespaces holds one namespace per subtest, so both Logs of it share one.
var namespaces sync.Map // *testing.T → string

func nsOf(t *testing.T) string {
	if ns, ok := namespaces.Load(t); ok {
		return ns.(string)
	}
	ns := redistest.Namespace(t)
	namespaces.Store(t, ns)
	t.Cleanup(func() { namespaces.Delete(t) })
	return ns
}

func sharedFactory(client func(t *testing.T) (redis.UniversalClient, string)) streamlogtest.NewLog {
	return func(t *testing.T, cfg streamlog.Config) streamlog.Log {
		rdb, ns := client(t)
		l := streamlog.NewRedis(rdb, ns, cfg)
		run(t, l)
		return l
	}
}

// run runs l until the returned stop is called or the test ends; stop
// returns once Run has (and fails the test if Run failed).
func run(t *testing.T, l streamlog.Log) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// NewRedis starts nothing: appends work at once, a Read waits for Run and
// then gets what was written before and after, and when Run's context
// ends the read ends with ErrClosed, Run returns, and nothing of it is
// left running.
func TestRedisReadWaitsForRun(t *testing.T) {
	rdb := redistest.Client(t)
	before := goleak.IgnoreCurrent()
	l := streamlog.NewRedis(rdb, redistest.Namespace(t), streamlog.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Append(ctx, "t1", "early"); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("NewRedis or Append started a goroutine: %v", err)
	}
	// Without Run, a Read gets nothing until its context ends.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	err := l.Read(short, "t1", 0, func(e streamlog.Entry) error { return fmt.Errorf("got %+v before Run", e) })
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read before Run = %v, want its context's end", err)
	}
	// One that began before Run follows once Run runs.
	got := make(chan streamlog.Entry, 4)
	read := make(chan error, 1)
	go func() {
		read <- l.Read(ctx, "t1", 0, func(e streamlog.Entry) error { got <- e; return nil })
	}()
	stop := run(t, l)
	if e := <-got; e.Data != "early" {
		t.Fatalf("first entry %+v, want the one appended before Run", e)
	}
	if _, err := l.Append(ctx, "t1", "late"); err != nil {
		t.Fatal(err)
	}
	if e := <-got; e.Data != "late" {
		t.Fatalf("second entry %+v, want the one appended while following", e)
	}
	stop()
	if err := <-read; !errors.Is(err, streamlog.ErrClosed) {
		t.Fatalf("Read after Run stopped = %v, want ErrClosed", err)
	}
	if err := goleak.Find(before); err != nil {
		t.Errorf("Run left a goroutine behind: %v", err)
	}
}

// TTL and grace are set on both keys, on append and on end.
func TestRedisKeysAndTTL(t *testing.T) {
	rdb := redistest.Client(t)
	ns := redistest.Namespace(t)
	l := streamlog.NewRedis(rdb, ns, streamlog.Config{TTL: time.Hour, Grace: time.Minute})
	run(t, l)
	ctx := context.Background()
	if _, err := l.Append(ctx, "t1", "x"); err != nil {
		t.Fatal(err)
	}
	key := ns + ":stream:{t1}"
	if got := streamlog.Key(ns, "t1"); got != key {
		t.Fatalf("Key = %q, want %q", got, key)
	}
	for _, k := range []string{key, key + ":meta"} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 59*time.Minute || ttl > time.Hour {
			t.Fatalf("%s: TTL %s after an append, want about 1h", k, ttl)
		}
	}
	if err := l.End(ctx, "t1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, key + ":meta"} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 59*time.Second || ttl > time.Minute {
			t.Fatalf("%s: TTL %s after the end, want about 1m (the grace)", k, ttl)
		}
	}
}

// Following holds no pooled connection: 300 readers of 100 tasks all
// follow live through a client of 4 connections (a blocked XREAD per
// reader would starve it), and each gets its task's chunk and end.
func TestRedisManyReadersFewConnections(t *testing.T) {
	redistest.Client(t)
	opt, _ := redis.ParseURL(redistest.URL())
	opt.PoolSize, opt.PoolTimeout = 4, 2*time.Second
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	l := streamlog.NewRedis(rdb, redistest.Namespace(t), streamlog.Config{})
	run(t, l)

	const tasks, readers = 100, 300
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, readers)
	started := make(chan struct{}, readers)
	for i := range readers {
		go func() {
			task := fmt.Sprint("t", i%tasks)
			n := 0
			err := l.Read(ctx, task, 0, func(e streamlog.Entry) error {
				if n == 0 {
					started <- struct{}{}
				}
				n++
				return nil
			})
			if err == nil && n != 2 {
				err = fmt.Errorf("%s: %d entries, want a chunk and the end", task, n)
			}
			errs <- err
		}()
	}
	for i := range tasks {
		if _, err := l.Append(ctx, fmt.Sprint("t", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	for range readers { // every reader is following (it has its first entry)
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("readers did not all get their first chunk")
		}
	}
	for i := range tasks {
		if err := l.End(ctx, fmt.Sprint("t", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
