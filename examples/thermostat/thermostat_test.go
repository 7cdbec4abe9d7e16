package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// startHub runs the hub as main does (test/kit/hubtest), on 127.0.0.1:0.
func startHub(t *testing.T) (*hub.Registry, string) {
	t.Helper()
	h := hubtest.Start(t, nil)
	return h.Main.Registry, "mqtt://" + h.MQTTAddr()
}

func TestThermostat(t *testing.T) {
	reg, url := startHub(t)
	const id = "urn:lmos:example:thermostat:test"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, url, id, t.TempDir(), 20*time.Millisecond, slog.New(slog.DiscardHandler)) }()

	user, err := agent.Connect(ctx, agent.Options{URL: url, TD: map[string]any{"title": "Tester"}})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()

	// The thermostat joins and publishes its temperature.
	var temp float64
	for {
		v, err := user.ReadProperty(ctx, id, "temperature")
		if err == nil && v.Decode(&temp) == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no temperature: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitPresence(t, reg, id, hub.PresenceOnline)

	// Out of range: a failed result with the problem.
	var p *agent.Problem
	if _, err := user.Invoke(ctx, id, "setTarget", map[string]any{"celsius": 40}); !errors.As(err, &p) || p.Status != 400 {
		t.Fatalf("setTarget 40: %v", err)
	}
	if _, err := user.Invoke(ctx, id, "setTarget", map[string]any{}, agent.WithContentType(agent.CBOR)); !errors.As(err, &p) || p.Status != 400 {
		t.Fatalf("setTarget without celsius: %v", err)
	}

	// Heating up to 30 °C passes 28 °C: one overheat event.
	overheat := make(chan agent.Value, 4)
	stopEv, err := user.Subscribe(ctx, id, "overheat", func(v agent.Value) { overheat <- v })
	if err != nil {
		t.Fatal(err)
	}
	defer stopEv()
	out, err := user.Invoke(ctx, id, "setTarget", map[string]any{"celsius": 30})
	var res struct{ Target float64 }
	if err != nil || out.Decode(&res) != nil || res.Target != 30 {
		t.Fatalf("setTarget 30: %s %v", out, err)
	}
	select {
	case v := <-overheat:
		var ev struct{ Temperature float64 }
		if err := v.Decode(&ev); err != nil || ev.Temperature <= overheatAt {
			t.Fatalf("overheat %s %v", v, err)
		}
	case <-ctx.Done():
		t.Fatal("no overheat event")
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	waitPresence(t, reg, id, hub.PresenceOffline)
}

// waitPresence waits for the registry to record the Thing's presence
// (the broker records it asynchronously).
func waitPresence(t *testing.T, reg *hub.Registry, id, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		th, err := reg.Get(id)
		if err == nil && th.Meta.Presence.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("presence of %s: %+v (%v), want %s", id, th.Meta.Presence, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
