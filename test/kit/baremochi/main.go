// Command baremochi is a bare mochi v2 broker — its defaults and an
// allow-all hook, nothing of the hub — for the benchmarks that compare the
// hub, mosquitto and mochi alone, each in its own process: memory (test/e2e
// BenchmarkMQTTIdleAgentsRSS, BenchmarkSteadyIdleRSS), rates and CPU per
// delivery (BenchmarkMQTTFanout50, BenchmarkMQTTQoS0, BenchmarkMQTTQoS1)
// and request/response (BenchmarkMQTTRequestResponse100Agents).
//
// It listens on -addr, prints "listening <addr>" on stdout and serves until
// SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// allowAll is mochi's auth.AllowHook, without importing hooks/auth (its
// ledger pulls yaml into go.mod).
type allowAll struct{ mochi.HookBase }

func (allowAll) ID() string { return "allow-all" }
func (allowAll) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}
func (allowAll) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }
func (allowAll) OnACLCheck(*mochi.Client, string, bool) bool              { return true }

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	s := mochi.New(&mochi.Options{Logger: slog.New(slog.DiscardHandler)})
	tcp := listeners.NewTCP(listeners.Config{ID: "tcp", Address: *addr})
	if err := s.AddHook(new(allowAll), nil); err != nil {
		fail(err)
	}
	if err := s.AddListener(tcp); err != nil {
		fail(err)
	}
	if err := s.Serve(); err != nil {
		fail(err)
	}
	fmt.Println("listening", tcp.Address())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = s.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "baremochi:", err)
	os.Exit(1)
}
