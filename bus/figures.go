package bus

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Figures are what each instance publishes about itself for the others to
// add up (the demand an autoscaler reads, the operator's overview): one
// small document per kind and instance, "{ns}:{kind}:{instance}", that
// expires unless written again. An instance writes its own while it has
// something to say and deletes it once when it has not, so an idle
// instance writes nothing.
type Figures struct {
	rdb redis.UniversalClient
	ns  string
	ttl time.Duration
}

// NewFigures returns the figures on rdb in namespace (DefaultNamespace if
// empty), each written to live for ttl. The caller owns rdb.
func NewFigures(rdb redis.UniversalClient, namespace string, ttl time.Duration) *Figures {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &Figures{rdb: rdb, ns: namespace, ttl: ttl}
}

// Key is where instance's figures of kind live.
func (f *Figures) Key(kind, instance string) string { return f.ns + ":" + kind + ":" + instance }

// Put writes instance's figures of kind, or deletes them when b is nil.
func (f *Figures) Put(ctx context.Context, kind, instance string, b []byte) error {
	if b == nil {
		return f.rdb.Del(ctx, f.Key(kind, instance)).Err()
	}
	return f.rdb.Set(ctx, f.Key(kind, instance), b, f.ttl).Err()
}

// Read reads the figures of kind of each of ids, in one round trip.
// Instances with none (idle, or gone) are absent from the answer.
func (f *Figures) Read(ctx context.Context, kind string, ids []string) (map[string][]byte, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := f.rdb.Pipeline()
	cmds := make(map[string]*redis.StringCmd, len(ids))
	for _, id := range ids {
		cmds[id] = pipe.Get(ctx, f.Key(kind, id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make(map[string][]byte, len(cmds))
	for id, cmd := range cmds {
		if b, err := cmd.Bytes(); err == nil { // else redis.Nil: none published
			out[id] = b
		}
	}
	return out, nil
}
