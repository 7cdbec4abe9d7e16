package main

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
)

// overheatAt is the temperature above which the thermostat emits overheat.
const overheatAt = 28.0

// description is the thermostat's TD: the agent package fills in the forms.
func description(id string) map[string]any {
	return map[string]any{
		"id": id, "title": "Thermostat", "@type": "lmos:Agent",
		"description": "A simulated room thermostat",
		"properties": map[string]any{
			"temperature": map[string]any{"type": "number", "unit": "°C", "readOnly": true, "observable": true},
		},
		"actions": map[string]any{"setTarget": map[string]any{
			"input": map[string]any{"type": "object", "required": []string{"celsius"},
				"properties": map[string]any{"celsius": map[string]any{"type": "number", "minimum": 5, "maximum": 30}}},
			"output": map[string]any{"type": "object"},
		}},
		"events": map[string]any{"overheat": map[string]any{"data": map[string]any{"type": "object"}}},
	}
}

// run is the thermostat: it joins the hub, serves setTarget, publishes the
// temperature every tick as it drifts towards the target, and emits
// overheat when it rises above overheatAt. It returns when ctx ends.
func run(ctx context.Context, hubURL, id, stateDir string, tick time.Duration, log *slog.Logger) error {
	a, err := agent.Connect(ctx, agent.Options{URL: hubURL, TD: description(id), Logger: log, StateDir: stateDir})
	if err != nil {
		return err
	}
	defer a.Close()
	log.Info("thermostat running", "id", a.ID(), "did", a.DID(), "state", stateDir)

	var mu sync.Mutex
	temp, target := 20.0, 21.0
	a.HandleAction("setTarget", func(ctx context.Context, in agent.Input) (any, error) {
		var req struct {
			Celsius *float64 `json:"celsius"`
		}
		if err := in.Decode(&req); err != nil {
			return nil, err
		}
		if req.Celsius == nil || *req.Celsius < 5 || *req.Celsius > 30 {
			return nil, agent.NewProblem(http.StatusBadRequest, "celsius must be a number from 5 to 30")
		}
		mu.Lock()
		defer mu.Unlock()
		target = *req.Celsius
		log.Info("target set", "celsius", target)
		return map[string]any{"target": target, "temperature": temp}, nil
	})

	hot := false
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		mu.Lock()
		temp += math.Max(-0.5, math.Min(0.5, target-temp))
		now := math.Round(temp*10) / 10
		mu.Unlock()
		if err := a.SetProperty("temperature", now); err != nil {
			log.Warn("cannot publish the temperature", "err", err)
		}
		if now > overheatAt && !hot {
			if err := a.Emit("overheat", map[string]any{"temperature": now}); err != nil {
				log.Warn("cannot emit overheat", "err", err)
			}
		}
		hot = now > overheatAt
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
