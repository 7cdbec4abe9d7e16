//go:build otel

package e2e

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestTracingContinuesTheConsumersTrace (a binary built with -tags otel):
// an invocation through the HTTP proxy with a W3C traceparent is one
// server span in the consumer's trace, its parent the consumer's span; the
// agent is sent the hub's span as its parent; a refused invocation is a
// span with an error status. The spans reach a real OTLP/HTTP receiver
// (this test's) when the hub stops.
func TestTracingContinuesTheConsumersTrace(t *testing.T) {
	got := make(chan *coltrace.ExportTraceServiceRequest, 16)
	rx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			t.Errorf("OTLP receiver: %s %s: %d bytes that do not decode", r.Method, r.URL.Path, len(body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- &req
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rx.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.URL)
	h := startHub(t, nil)
	a := h.startAgent(agentID)

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	hdr := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testToken,
		"traceparent": "00-" + traceID + "-" + parentID + "-01"}
	resp, body := h.send("POST", actionPath(agentID, "order"), []byte(`{"code":"123","qty":10,"at":[1.5,2]}`), hdr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("invoke: %d %s", resp.StatusCode, body)
	}
	var sent string
	select {
	case p := <-a.got:
		if p.Properties != nil {
			sent = p.Properties.User.Get("traceparent")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent got no request")
	}
	// Refused before the Thing: no such action.
	if resp, _ := h.send("POST", actionPath(agentID, "nope"), []byte(`{}`), hdr); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown action: %d", resp.StatusCode)
	}
	h.Close() // flushes the batch

	var spans []*tracev1.Span
	for len(spans) < 2 {
		select {
		case req := <-got:
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					spans = append(spans, ss.Spans...)
				}
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d spans reached the receiver, want 2", len(spans))
		}
	}
	var ok, refused *tracev1.Span
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != traceID || hex.EncodeToString(s.ParentSpanId) != parentID {
			t.Errorf("span %q: trace %x parent %x, want the consumer's %s / %s", s.Name, s.TraceId, s.ParentSpanId, traceID, parentID)
		}
		if s.Kind != tracev1.Span_SPAN_KIND_SERVER {
			t.Errorf("span %q kind %v", s.Name, s.Kind)
		}
		switch s.Name {
		case "invokeaction order":
			ok = s
		case "invokeaction nope":
			refused = s
		}
	}
	if ok == nil || refused == nil {
		t.Fatalf("spans %v, want invokeaction order and invokeaction nope", spans)
	}
	if ok.Status.GetCode() == tracev1.Status_STATUS_CODE_ERROR || refused.Status.GetCode() != tracev1.Status_STATUS_CODE_ERROR {
		t.Errorf("status: completed %v, refused %v", ok.Status, refused.Status)
	}
	// The agent was sent the hub's span as its parent, in the same trace.
	if want := "00-" + traceID + "-" + hex.EncodeToString(ok.SpanId) + "-01"; sent != want {
		t.Errorf("the agent got traceparent %q, want %q", sent, want)
	}
	if !strings.Contains(attrs(ok), "lmos.outcome=completed") || !strings.Contains(attrs(refused), "lmos.outcome=refused") {
		t.Errorf("attributes: %s / %s", attrs(ok), attrs(refused))
	}
}

func attrs(s *tracev1.Span) string {
	var b strings.Builder
	for _, kv := range s.Attributes {
		b.WriteString(kv.Key + "=" + kv.Value.GetStringValue() + " ")
	}
	return b.String()
}
