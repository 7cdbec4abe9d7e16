//go:build otel

package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// openTracing exports a span per routed interaction over OTLP/HTTP when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
// (the exporter reads those and the other OTEL_EXPORTER_OTLP_* variables
// itself); without either, nothing is traced.
func (m *Main) openTracing() error {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil
	}
	exp, err := otlptracehttp.New(context.Background())
	if err != nil {
		return fmt.Errorf("cannot open the OTLP trace exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "lmos-hub"),
		attribute.String("service.version", m.Version), attribute.String("lmos.hub.id", m.DB.HubID()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	m.Router.SetTracer(otelTracer{tp.Tracer("github.com/eclipse-lmos/lmos-hub")})
	m.onClose("tracing", tp.Shutdown) // flushes the spans not yet sent
	m.Logger.Info("tracing interactions over OTLP/HTTP")
	return nil
}

// otelTracer makes one server span per interaction, the child of the
// consumer's traceparent when it sent one, and passes the span on to the
// Thing as its parent.
type otelTracer struct{ t trace.Tracer }

var propagator = propagation.TraceContext{}

func (o otelTracer) Start(in hub.Interaction) (string, string, func(hub.Source, string)) {
	carrier := propagation.MapCarrier{}
	if in.Traceparent != "" {
		carrier.Set("traceparent", in.Traceparent)
		carrier.Set("tracestate", in.Tracestate)
	}
	ctx := propagator.Extract(context.Background(), carrier)
	ctx, span := o.t.Start(ctx, string(in.Op)+" "+in.Name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(time.Now()), trace.WithAttributes(
			attribute.String("lmos.thing.id", in.ThingID), attribute.String("lmos.op", string(in.Op)),
			attribute.String("lmos.affordance", in.Name), attribute.String("lmos.door", string(in.Door))))
	out := propagation.MapCarrier{}
	propagator.Inject(ctx, out)
	return out.Get("traceparent"), out.Get("tracestate"), func(transport hub.Source, outcome string) {
		span.SetAttributes(attribute.String("lmos.transport", string(transport)), attribute.String("lmos.outcome", outcome))
		if outcome != hub.OutcomeCompleted && outcome != hub.OutcomeStreamed {
			span.SetStatus(codes.Error, outcome)
		}
		span.End()
	}
}
