package bus_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// The registry and the lock on the shared Redis and on a private 3-master
// Redis Cluster: on the cluster their keys land in different slots, so any
// command spanning keys would fail with CROSSSLOT.
func TestRegistryAndLock(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient, ns string) {
		t.Run("Registry", func(t *testing.T) { testRegistry(t, rdb, ns) })
		t.Run("Lock", func(t *testing.T) { testLock(t, rdb, ns) })
	}
	t.Run("single", func(t *testing.T) { run(t, redistest.Client(t), redistest.Namespace(t)) })
	t.Run("cluster", func(t *testing.T) {
		run(t, redistest.StartCluster(t, redistest.ClusterOptions{}).Client(t), "sy")
	})
}

func testRegistry(t *testing.T, rdb redis.UniversalClient, ns string) {
	ctx := context.Background()
	clock := time.Now()
	reg := bus.NewRegistry(rdb, bus.RegistryConfig{Namespace: ns, TTL: time.Minute, MissingFor: time.Second,
		Now: func() time.Time { return clock }})
	// Enough instances that, on a cluster, their alive keys span masters.
	ids := []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"}
	for _, id := range ids {
		if err := reg.Register(ctx, bus.InstanceInfo{ID: id, Name: "name-" + id, Nodes: 3}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := reg.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, info := range list {
		if info.Name != "name-"+info.ID || info.Nodes != 3 || info.Heartbeat.IsZero() {
			t.Fatalf("Instances returned %+v", info)
		}
		got = append(got, info.ID)
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Fatalf("Instances = %v, want %v", got, ids)
	}
	delAlive := func(id string) {
		t.Helper()
		if err := rdb.Del(ctx, ns+":inst:alive:"+id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	alive := func(want map[string]bool) {
		t.Helper()
		got, err := reg.Alive(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			w, listed := want[id]
			if !listed {
				w = true
			}
			if got[id] != w {
				t.Fatalf("Alive = %v; %s should be %v", got, id, w)
			}
		}
	}

	// i1 deregisters; i2's alive key is lost (a crash, or a Redis that
	// lost its data): both still count as alive until their keys have been
	// missing for MissingFor, since a live instance writes its key back (a
	// drained one has left its channel too, which the watcher sees at
	// once). The registry's listing drops i1 at once.
	if err := reg.Deregister(ctx, "i1"); err != nil {
		t.Fatal(err)
	}
	delAlive("i2")
	alive(nil)
	if live, n, err := reg.LiveIDs(ctx); err != nil || n != len(ids)-1 || slices.Contains(live, "i1") || !slices.Contains(live, "i2") {
		t.Fatalf("LiveIDs = %v, %d alive, %v; want all but i1", live, n, err)
	}
	clock = clock.Add(time.Second)
	alive(map[string]bool{"i1": false, "i2": false})

	// A key lost and written back within MissingFor never makes its
	// instance dead, even if it is lost again: a new span starts.
	delAlive("i3")
	alive(map[string]bool{"i1": false, "i2": false})
	if err := reg.Register(ctx, bus.InstanceInfo{ID: "i3"}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(600 * time.Millisecond)
	alive(map[string]bool{"i1": false, "i2": false})
	delAlive("i3")
	clock = clock.Add(600 * time.Millisecond)
	alive(map[string]bool{"i1": false, "i2": false})
	if err := reg.Register(ctx, bus.InstanceInfo{ID: "i3"}); err != nil {
		t.Fatal(err)
	}

	// The sweeper's own key, lost for longer than MissingFor: never dead to
	// itself. Sweep removes only i2's index entry (i1's is gone already),
	// calling onDead for it.
	delAlive("i0")
	alive(map[string]bool{"i1": false, "i2": false})
	clock = clock.Add(time.Second)
	var cleaned []string
	live, dead, err := reg.Sweep(ctx, "i0", func(_ context.Context, id string) error { cleaned = append(cleaned, id); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dead, []string{"i2"}) || !slices.Equal(cleaned, []string{"i2"}) || live != len(ids)-2 {
		t.Fatalf("Sweep = %d live, dead %v (cleaned %v), want %d live, dead [i2]", live, dead, cleaned, len(ids)-2)
	}
	members, err := rdb.SMembers(ctx, ns+":inst:index").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(members)
	if want := []string{"i0", "i3", "i4", "i5", "i6", "i7"}; !slices.Equal(members, want) {
		t.Fatalf("index after the sweep = %v, want %v", members, want)
	}
}

func testLock(t *testing.T, rdb redis.UniversalClient, ns string) {
	ctx := context.Background()
	a := bus.NewLock(rdb, ns, time.Minute, bus.InstanceInfo{ID: "a", Name: "A"})
	b := bus.NewLock(rdb, ns, time.Minute, bus.InstanceInfo{ID: "b", Name: "B"})
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	holder, err := b.Acquire(ctx)
	if !errors.Is(err, bus.ErrLockHeld) || holder.ID != "a" || holder.Name != "A" {
		t.Fatalf("second Acquire = %+v, %v; want held by a", holder, err)
	}
	if ok, err := a.Refresh(ctx); err != nil || !ok {
		t.Fatalf("holder's Refresh = %v, %v", ok, err)
	}
	if ok, err := b.Refresh(ctx); err != nil || ok {
		t.Fatalf("other's Refresh = %v, %v; want false", ok, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, bus.ErrLockHeld) {
		t.Fatalf("another instance's Release freed the lock: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx); err != nil {
		t.Fatalf("Acquire after the holder released: %v", err)
	}
	// Refresh of a lock that expired unseen takes it back.
	if err := rdb.Del(ctx, b.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Refresh(ctx); err != nil || !ok {
		t.Fatalf("Refresh after expiry = %v, %v; want re-taken", ok, err)
	}
	_ = b.Release(ctx)
}
