package web

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// metricHelp says what each family the HTTP adapter and the metrics
// library write counts. The library writes "# HELP family" with no text
// when metadata is on (metrics.ExposeMetadata); describeMetrics fills
// the text in from here. Adapters that write their own families (mqtt,
// tlscert) write their own HELP. docs/METRICS.md explains each family.
var metricHelp = map[string]string{
	// registry and store
	"lmos_registry_things":             "Things in the directory.",
	"lmos_registry_revision":           "Revision of the directory: how many changes it has seen since it was created.",
	"lmos_verify_signatures_total":     "Thing Description proof signatures checked.",
	"lmos_verify_batched_total":        "Proof signatures checked in a batch with concurrent writes' signatures.",
	"lmos_verify_batch_failures_total": "Signature batches that failed and were checked again one by one.",
	"lmos_store_size_bytes":            "Size of the hub's database file in bytes.",
	"lmos_uptime_seconds":              "Seconds since the hub started serving HTTP.",
	"lmos_join_pending":                "Join requests waiting for an administrator's approval.",
	"lmos_presence_things":             "Things in the directory by presence (online, offline, unknown).",
	// joins and interactions (Observer)
	"lmos_joins_total":                  "Join requests of agents (MQTT, WebSocket) and announced Things (mDNS), by door and how they ended: accepted, pending (parked for approval), deleted (deregistered) or rejected.",
	"lmos_joins_refused_total":          "Join requests refused, by door and reason (the limit's setting or the problem code).",
	"lmos_interactions_total":           "Interactions routed to Things, by the consumer's door (http, ws, mqtt; hub for group actions), the Thing's transport (mqtt, ws; none when refused first) and outcome.",
	"lmos_interaction_duration_seconds": "Time from routing an interaction to its final result or failure, by the Thing's transport (streams and refusals left out).",
	// HTTP, SSE, WebSocket
	"lmos_http_requests_total":           "HTTP requests answered, by route pattern and status code.",
	"lmos_http_request_duration_seconds": "Time to answer an HTTP request, by route pattern (event streams until they close).",
	"lmos_http_refused_total":            "HTTP requests refused, by reason (the limit's setting or the problem code).",
	"lmos_http_group_list_encoded_total": "Times GET /api/groups had to encode the group list again because a group changed.",
	"lmos_sse_dropped_total":             "Server-sent event streams closed because their reader fell too far behind.",
	"lmos_sse_refused_total":             "Server-sent event streams refused because the client already had too many open.",
	"lmos_sse_group_dropped_total":       "Group channel messages not written to a server-sent event stream whose queue was full.",
	"lmos_ws_connections":                "Open WebSocket connections of the LMOS gateway.",
	"lmos_ws_connections_total":          "WebSocket connections accepted by the LMOS gateway.",
	"lmos_ws_dropped_total":              "Droppable WebSocket messages (events, property changes) not sent to a slow consumer.",
	"lmos_ws_slow_closed_total":          "WebSocket connections closed because their send queue was full.",
	"lmos_ws_refused_total":              "WebSocket requests refused, by reason (the limit's setting or the problem code).",
	// Go runtime (metrics.WriteProcessMetrics)
	"go_sched_latencies_seconds":          "Time goroutines spent runnable before they ran.",
	"go_mutex_wait_seconds_total":         "Time goroutines spent blocked on a mutex.",
	"go_gc_mark_assist_cpu_seconds_total": "CPU time goroutines spent helping the garbage collector mark.",
	"go_gc_cpu_seconds_total":             "CPU time spent in the garbage collector.",
	"go_gc_pauses_seconds":                "Stop-the-world pauses of the garbage collector.",
	"go_scavenge_cpu_seconds_total":       "CPU time spent returning memory to the operating system.",
	"go_memlimit_bytes":                   "The Go runtime's soft memory limit (GOMEMLIMIT) in bytes.",
	"go_memstats_alloc_bytes":             "Bytes of heap objects allocated and not yet freed.",
	"go_memstats_alloc_bytes_total":       "Bytes allocated for heap objects since the start.",
	"go_memstats_buck_hash_sys_bytes":     "Bytes of memory in profiling bucket hash tables.",
	"go_memstats_frees_total":             "Heap objects freed since the start.",
	"go_memstats_gc_cpu_fraction":         "Fraction of the CPU time used by the garbage collector since the start.",
	"go_memstats_gc_sys_bytes":            "Bytes of memory in garbage collection metadata.",
	"go_memstats_heap_alloc_bytes":        "Bytes of heap objects allocated and not yet freed.",
	"go_memstats_heap_idle_bytes":         "Bytes in idle (unused) heap spans.",
	"go_memstats_heap_inuse_bytes":        "Bytes in in-use heap spans.",
	"go_memstats_heap_objects":            "Heap objects allocated and not yet freed.",
	"go_memstats_heap_released_bytes":     "Bytes of heap memory returned to the operating system.",
	"go_memstats_heap_sys_bytes":          "Bytes of heap memory obtained from the operating system.",
	"go_memstats_last_gc_time_seconds":    "Time of the last garbage collection, in seconds since the Unix epoch.",
	"go_memstats_lookups_total":           "Pointer lookups done by the runtime.",
	"go_memstats_mallocs_total":           "Heap objects allocated since the start.",
	"go_memstats_mcache_inuse_bytes":      "Bytes in in-use mcache structures.",
	"go_memstats_mcache_sys_bytes":        "Bytes of memory obtained from the operating system for mcache structures.",
	"go_memstats_mspan_inuse_bytes":       "Bytes in in-use mspan structures.",
	"go_memstats_mspan_sys_bytes":         "Bytes of memory obtained from the operating system for mspan structures.",
	"go_memstats_next_gc_bytes":           "Heap size at which the next garbage collection starts.",
	"go_memstats_other_sys_bytes":         "Bytes of memory in other runtime allocations.",
	"go_memstats_stack_inuse_bytes":       "Bytes in stack spans.",
	"go_memstats_stack_sys_bytes":         "Bytes of stack memory obtained from the operating system.",
	"go_memstats_sys_bytes":               "Bytes of memory obtained from the operating system by the Go runtime.",
	"go_gc_duration_seconds":              "Stop-the-world pause durations of the garbage collector.",
	"go_gomaxprocs":                       "Operating system threads that can run Go code at once (GOMAXPROCS).",
	"go_goroutines":                       "Goroutines that exist.",
	"go_threads":                          "Operating system threads created by the Go runtime.",
	"go_info":                             "The Go version the hub was built with (label version); always 1.",
	"go_info_ext":                         "The Go compiler and target the hub was built with (labels); always 1.",
	// process (metrics.WriteProcessMetrics, metrics.WriteFDMetrics)
	"process_cpu_seconds_system_total":              "CPU time the process spent in the kernel.",
	"process_cpu_seconds_total":                     "CPU time the process spent in user space and the kernel.",
	"process_cpu_seconds_user_total":                "CPU time the process spent in user space.",
	"process_major_pagefaults_total":                "Page faults that needed a disk read.",
	"process_minor_pagefaults_total":                "Page faults served without a disk read.",
	"process_num_threads":                           "Operating system threads of the process.",
	"process_resident_memory_bytes":                 "Resident memory of the process in bytes (VmRSS).",
	"process_start_time_seconds":                    "Start time of the process, in seconds since the Unix epoch.",
	"process_virtual_memory_bytes":                  "Virtual memory of the process in bytes.",
	"process_virtual_memory_peak_bytes":             "Peak virtual memory of the process in bytes.",
	"process_resident_memory_peak_bytes":            "Peak resident memory of the process in bytes (VmHWM).",
	"process_resident_memory_anon_bytes":            "Anonymous resident memory of the process in bytes (RssAnon).",
	"process_resident_memory_file_bytes":            "File-backed resident memory of the process in bytes (RssFile).",
	"process_resident_memory_shared_bytes":          "Shared resident memory of the process in bytes (RssShmem).",
	"process_io_read_bytes_total":                   "Bytes the process read through system calls.",
	"process_io_written_bytes_total":                "Bytes the process wrote through system calls.",
	"process_io_read_syscalls_total":                "Read system calls of the process.",
	"process_io_write_syscalls_total":               "Write system calls of the process.",
	"process_io_storage_read_bytes_total":           "Bytes the process caused to be read from storage.",
	"process_io_storage_written_bytes_total":        "Bytes the process caused to be written to storage (SD card wear).",
	"process_pressure_cpu_waiting_seconds_total":    "Time some of the process's tasks waited for a CPU (cgroup pressure).",
	"process_pressure_cpu_stalled_seconds_total":    "Time all of the process's tasks waited for a CPU (cgroup pressure).",
	"process_pressure_io_waiting_seconds_total":     "Time some of the process's tasks waited for I/O (cgroup pressure).",
	"process_pressure_io_stalled_seconds_total":     "Time all of the process's tasks waited for I/O (cgroup pressure).",
	"process_pressure_memory_waiting_seconds_total": "Time some of the process's tasks waited for memory (cgroup pressure).",
	"process_pressure_memory_stalled_seconds_total": "Time all of the process's tasks waited for memory (cgroup pressure).",
	"process_cgroup_cpu_throttled_seconds_total":    "Time the process was throttled by its cgroup's CPU limit.",
	"process_open_fds":                              "Open file descriptors of the process.",
	"process_max_fds":                               "Limit on the process's open file descriptors.",
}

// metricTypes corrects the library's type for families it writes as
// gauges although they only grow.
var metricTypes = map[string]string{
	"process_io_read_bytes_total":            "counter",
	"process_io_written_bytes_total":         "counter",
	"process_io_read_syscalls_total":         "counter",
	"process_io_write_syscalls_total":        "counter",
	"process_io_storage_read_bytes_total":    "counter",
	"process_io_storage_written_bytes_total": "counter",
}

// metricsLeftOut are library families /metrics does not write: their names
// break the exposition format's conventions (a counter without _total, a
// gauge ending in _count) and they say nothing useful here — cgo is off,
// forced collections are not the hub's, go_gomaxprocs gives the CPUs.
var metricsLeftOut = map[string]bool{
	"go_cgo_calls_count": true,
	"go_gc_forced_count": true,
	"go_cpu_count":       true,
}

var exposeMetadata sync.Once

// serveMetrics writes every family with its HELP and TYPE.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	exposeMetadata.Do(func() { metrics.ExposeMetadata(true) })
	var buf bytes.Buffer
	s.metrics.WritePrometheus(&buf)
	if s.cfg.Observer != nil {
		s.cfg.Observer.WritePrometheus(&buf)
	}
	for _, write := range s.cfg.Metrics {
		write(&buf)
	}
	writeLinkMetrics(&buf, s.links())
	metrics.WriteProcessMetrics(&buf)
	metrics.WriteFDMetrics(&buf)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	describeMetrics(w, buf.Bytes())
}

// describeMetrics copies the exposition src to dst, filling in empty HELP
// texts (metricHelp), correcting types (metricTypes) and leaving out
// metricsLeftOut.
func describeMetrics(dst io.Writer, src []byte) {
	out := bufio.NewWriter(dst)
	for line := range bytes.Lines(src) {
		text := string(bytes.TrimSuffix(line, []byte("\n")))
		switch {
		case strings.HasPrefix(text, "# HELP "):
			family, help, _ := strings.Cut(text[len("# HELP "):], " ")
			if metricsLeftOut[family] {
				continue
			}
			if help == "" {
				help = metricHelp[family]
			}
			text = "# HELP " + family + " " + help
		case strings.HasPrefix(text, "# TYPE "):
			family, typ, _ := strings.Cut(text[len("# TYPE "):], " ")
			if metricsLeftOut[family] {
				continue
			}
			if t, ok := metricTypes[family]; ok {
				typ = t
			}
			text = "# TYPE " + family + " " + typ
		case text != "" && !strings.HasPrefix(text, "#"):
			name, _, _ := strings.Cut(text, " ")
			name, _, _ = strings.Cut(name, "{")
			if metricsLeftOut[name] {
				continue
			}
		}
		out.WriteString(text)
		out.WriteByte('\n')
	}
	_ = out.Flush()
}

// Observer counts what the domain tells it (hub.Observer): joins and
// routed interactions. app makes one before the hub admits anything and
// gives it to the Router, the Admission and the Server (Config.Observer).
type Observer struct {
	set *metrics.Set
}

var _ hub.Observer = (*Observer)(nil)

// NewObserver returns an Observer with nothing counted.
func NewObserver() *Observer { return &Observer{set: metrics.NewSet()} }

// interactionBuckets are the upper bounds of lmos_interaction_duration_seconds:
// from a loopback round trip to the proxy's default timeout.
var interactionBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Joined counts a join by door and status, and a refused one by reason.
func (o *Observer) Joined(door hub.Source, status, reason string) {
	o.set.GetOrCreateCounter(fmt.Sprintf(`lmos_joins_total{door=%q,status=%q}`, door, status)).Inc()
	if status == lmos.JoinRejected {
		o.set.GetOrCreateCounter(fmt.Sprintf(`lmos_joins_refused_total{door=%q,reason=%q}`, door, reason)).Inc()
	}
}

// Routed counts an interaction by the consumer's door, the Thing's
// transport and the outcome, and times those that reached a Thing and
// were not streams.
func (o *Observer) Routed(door, transport hub.Source, outcome string, d time.Duration) {
	if door == "" {
		door = "hub"
	}
	if transport == "" {
		transport = "none"
	}
	o.set.GetOrCreateCounter(fmt.Sprintf(`lmos_interactions_total{door=%q,transport=%q,outcome=%q}`, door, transport, outcome)).Inc()
	if outcome != hub.OutcomeRefused && outcome != hub.OutcomeStreamed {
		o.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`lmos_interaction_duration_seconds{transport=%q}`, transport), interactionBuckets).Update(d.Seconds())
	}
}

// WritePrometheus writes the counts.
func (o *Observer) WritePrometheus(w io.Writer) { o.set.WritePrometheus(w) }
