// Command thermostat is a small LMOS agent built on the agent package: a
// simulated thermostat with a temperature property, a setTarget action and
// an overheat event.
//
//	go run ./examples/thermostat -hub mqtt://localhost:1883
//
// It keeps its key and the credentials the hub issues in a state directory
// (default: lmos-thermostat/<id> in the user's configuration directory), so
// that it gets back in after a restart. With -state "" it keeps nothing: it
// joins unsigned, and a hub refuses its second start until an admin resets
// its credential (lmos-hub things reset-credential ID).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	host, _ := os.Hostname()
	hubURL := flag.String("hub", "mqtt://localhost:1883", "the hub's MQTT broker (mqtt://, mqtts://) or WebSocket (ws://host:port/ws, wss://)")
	id := flag.String("id", "urn:lmos:example:thermostat:"+host, "the Thing id")
	state := flag.String("state", "", `a directory that keeps the agent's key and the credentials the hub issues, so that it gets back in after a restart (default: lmos-thermostat/<id> in the user's configuration directory; "" keeps nothing: the TD is not signed, and a restart needs an admin's "lmos-hub things reset-credential ID")`)
	tick := flag.Duration("tick", 2*time.Second, "how often the temperature is published")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	dir := *state
	if !flagSet("state") {
		dir = defaultStateDir(*id, log)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *hubURL, *id, dir, *tick, log); err != nil {
		log.Error("thermostat failed", "err", err)
		os.Exit(1)
	}
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// defaultStateDir is the state directory of the Thing id when -state is
// not given: one per id under the user's configuration directory; "" (keep
// nothing) when there is none, with a line saying what that means.
func defaultStateDir(id string, log *slog.Logger) string {
	base, err := os.UserConfigDir()
	if err != nil {
		log.Warn("no state directory: the thermostat keeps no key or credentials, so a hub refuses its next start until an admin runs lmos-hub things reset-credential; give one with -state", "err", err)
		return ""
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, id)
	return filepath.Join(base, "lmos-thermostat", name)
}
