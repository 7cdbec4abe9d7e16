package mcpdoor

import (
	"fmt"
	"io"
	"sync/atomic"
)

// Outcomes of a tool call, the label of lmos_mcp_calls_total.
const (
	outcomeOK        = "ok"         // a result
	outcomeToolError = "tool_error" // refused, failed or timed out: a tool error
	outcomeBusy      = "busy"       // mcp.maxCalls were running
)

var outcomes = [...]string{outcomeOK, outcomeToolError, outcomeBusy}

// counters are the door's figures for /metrics.
type counters struct {
	calls   [len(outcomes)]atomic.Int64
	refused atomic.Int64 // requests refused before the SDK (limits, bad bodies)
}

func (c *counters) call(outcome string) {
	for i, o := range outcomes {
		if o == outcome {
			c.calls[i].Add(1)
		}
	}
}

// WritePrometheus writes the door's families in the Prometheus text
// format (docs/METRICS.md "MCP door").
func (d *Door) WritePrometheus(w io.Writer) {
	fmt.Fprintf(w, "# HELP lmos_mcp_calls_total MCP tool calls, by outcome: ok, tool_error (refused, failed or timed out), busy (mcp.maxCalls were running).\n# TYPE lmos_mcp_calls_total counter\n")
	for i, o := range outcomes {
		fmt.Fprintf(w, "lmos_mcp_calls_total{outcome=%q} %d\n", o, d.stats.calls[i].Load())
	}
	fmt.Fprintf(w, "# HELP lmos_mcp_refused_total MCP requests refused before they were read: too many sessions or streams, bodies too large or not JSON-RPC, bad filters.\n# TYPE lmos_mcp_refused_total counter\nlmos_mcp_refused_total %d\n", d.stats.refused.Load())
	fmt.Fprintf(w, "# HELP lmos_mcp_sessions Open MCP sessions (revisions before 2026-07-28).\n# TYPE lmos_mcp_sessions gauge\nlmos_mcp_sessions %d\n", d.sessions())
	fmt.Fprintf(w, "# HELP lmos_mcp_listeners Open MCP notification streams.\n# TYPE lmos_mcp_listeners gauge\nlmos_mcp_listeners %d\n", d.listening.Load())
	fmt.Fprintf(w, "# HELP lmos_mcp_tools Tools of Things and groups the MCP door offers.\n# TYPE lmos_mcp_tools gauge\nlmos_mcp_tools %d\n", len(d.catalog().names))
}
