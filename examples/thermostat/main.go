// Command thermostat is a small LMOS agent built on the agent package: a
// simulated thermostat with a temperature property, a setTarget action and
// an overheat event.
//
//	go run ./examples/thermostat -hub mqtt://localhost:1883
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	host, _ := os.Hostname()
	hubURL := flag.String("hub", "mqtt://localhost:1883", "the hub's MQTT broker")
	id := flag.String("id", "urn:lmos:example:thermostat:"+host, "the Thing id")
	state := flag.String("state", "", "a directory that keeps the agent's key, so its DID survives restarts (default: none, the TD is not signed)")
	tick := flag.Duration("tick", 2*time.Second, "how often the temperature is published")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *hubURL, *id, *state, *tick, log); err != nil {
		log.Error("thermostat failed", "err", err)
		os.Exit(1)
	}
}
