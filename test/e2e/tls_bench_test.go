package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
)

// BenchmarkTLSHandshake: one new connection and GET /healthz per
// iteration on the hub's HTTP listener (plain), and on its HTTPS listener
// with a full ECDSA P-256 handshake (no session cache) or a resumed one
// (TLS 1.3 session tickets): the difference is what a handshake costs.
func BenchmarkTLSHandshake(b *testing.B) {
	h := hubtest.Start(b, func(c *Config) { c.TLS.Enabled = true })
	check, err := lmos.Pin(h.Main.TLS.Fingerprint())
	if err != nil {
		b.Fatal(err)
	}
	client := func(cfg *tls.Config) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}}
	}
	full := lmos.PinnedConfig(check)
	resumed := lmos.PinnedConfig(check)
	resumed.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	for _, tc := range []struct {
		name   string
		url    string
		c      *http.Client
		resume bool
	}{
		{"plain", h.URL, client(nil), false},
		{"tls-full", h.HTTPSURL, client(full), false},
		{"tls-resumed", h.HTTPSURL, client(resumed), true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			get := func() *http.Response {
				resp, err := tc.c.Get(tc.url + "/healthz")
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("healthz: %s", resp.Status)
				}
				return resp
			}
			get() // primes the session cache
			r := get()
			if tc.resume != (r.TLS != nil && r.TLS.DidResume) {
				b.Fatalf("resumed %v, want %v", r.TLS != nil && r.TLS.DidResume, tc.resume)
			}
			if r.TLS != nil {
				b.Logf("%s, key exchange %s", tls.VersionName(r.TLS.Version), r.TLS.CurveID)
			}
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				get()
				lat = append(lat, time.Since(start))
			}
			percentile.Report(b, lat, time.Microsecond, "µs")
		})
	}
}

// BenchmarkTLSRoundTrip: an action invoked through the hub and answered,
// with both the consumer and the serving agent (agent library) on the same
// door: MQTT against MQTTS, WebSocket against WSS, in one hub and run.
func BenchmarkTLSRoundTrip(b *testing.B) {
	h := hubtest.Start(b, func(c *Config) {
		c.TLS.Enabled = true
		// Measure the doors, not the WebSocket message limit.
		c.HTTP.WebSocket.MessageRate, c.HTTP.WebSocket.MessageBurst = 1e6, 1e6
	})
	fp := h.Main.TLS.Fingerprint()
	for _, tc := range []struct{ name, url string }{
		{"mqtt", "mqtt://" + h.Main.MQTTAddr.String()},
		{"mqtts", "mqtts://" + h.Main.MQTTSAddr.String()},
		{"ws", "ws://" + h.Main.HTTPAddr.String() + "/ws"},
		{"wss", "wss://" + h.Main.HTTPSAddr.String() + "/ws"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			id := "urn:bench:tls-echo-" + tc.name
			connect := func(td map[string]any) *agent.Agent {
				a, err := agent.Connect(ctx, agent.Options{URL: tc.url, TLSFingerprint: fp, TD: td, Timeout: 10 * time.Second,
					Logger: hubtest.Logger(b)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = a.Close() })
				return a
			}
			echo := connect(map[string]any{"id": id, "title": "Echo", "actions": map[string]any{"echo": map[string]any{}}})
			echo.HandleAction("echo", func(ctx context.Context, in agent.Input) (any, error) {
				var v any
				err := in.Decode(&v)
				return v, err
			})
			consumer := connect(map[string]any{"id": id + "-consumer", "title": "Consumer"})
			n := 0
			invoke := func() time.Duration {
				n++
				start := time.Now()
				out, err := consumer.Invoke(ctx, id, "echo", map[string]any{"n": n})
				d := time.Since(start)
				var got map[string]int
				if err != nil || out.Decode(&got) != nil || got["n"] != n {
					b.Fatalf("invoke %d: %v %v", n, got, err)
				}
				return d
			}
			for range 100 {
				invoke()
			}
			var lat []time.Duration
			for b.Loop() {
				lat = append(lat, invoke())
			}
			percentile.Report(b, lat, time.Microsecond, "µs")
		})
	}
}

// BenchmarkTLSIdleRSS builds the real binary and reads its VmRSS idle with
// an empty store, with TLS off and on (the certificate generated at start,
// both HTTPS and MQTTS listening), as BenchmarkIdleRSS does.
func BenchmarkTLSIdleRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	bin := buildTool(b, lmosHubPkg, "lmos-hub")
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"tls-off", nil},
		{"tls-on", []string{"--tls", "--https-addr", "127.0.0.1:0", "--mqtts-addr", "127.0.0.1:0"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				p := startHubBinary(b, bin, b.TempDir(), tc.extra...)
				time.Sleep(2 * time.Second)
				rss := procMemMB(b, p.pid)
				p.stop()
				b.ReportMetric(rss["VmRSS"], "idle-RSS-MB")
				b.ReportMetric(rss["RssAnon"], "idle-anon-MB")
			}
		})
	}
}
