// Command rrload is the request/response load generator of the benchmarks
// (test/e2e BenchmarkMQTTRequestResponse100Agents). It runs in its own
// process, so that the broker under test — the hub, a bare mochi broker or
// mosquitto, each a process of its own too — never shares a Go runtime
// (scheduler, GC) with the clients that load it, and every broker pays the
// same hops between processes.
//
// It connects one echo agent per entry of -agents (paho.golang, MQTT 5),
// each subscribed at QoS 1 to its action lmos/v1/things/{key}/actions/echo,
// and one requester (client id bench-requester) subscribed to its reply
// inbox lmos/v1/clients/bench-requester/replies. The requester invokes the
// agents in turn, one invocation at a time, at -qos: CBOR input, Response
// Topic and Correlation Data (PROTOCOL §4.3); the agent answers on the
// Response Topic at the QoS it received, CBOR with the user property
// lmos-status=completed, and the requester checks the answer. After -warmup
// invocations it times -n more, each from the publish until its checked
// result, and prints one JSON line:
//
//	{"latenciesNs":[…], "brokerCPUNs":…, "brokerSwitches":…}
//
// brokerCPUNs is the user + system CPU time process -pid (the broker; 0:
// not measured) used over the timed invocations, from /proc;
// brokerSwitches the voluntary context switches of its threads meanwhile
// (each time one of them went to sleep: waiting for the network, for
// work, or for another thread), a count that other load on the machine
// hardly changes.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/mqttdial"
	"github.com/eclipse/paho.golang/paho"
	"github.com/fxamacker/cbor/v2"
)

// agent is an entry of -agents: a Thing id and, on the hub, the
// credentials its join issued (empty: anonymous).
type agent struct {
	ID       string `json:"id"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

type result struct {
	LatenciesNs []int64 `json:"latenciesNs"`
	BrokerCPUNs int64   `json:"brokerCPUNs"`
	// BrokerSwitches can miss the switches of a thread that ended
	// meanwhile.
	BrokerSwitches int64 `json:"brokerSwitches"`
}

type echoInput struct {
	N    uint64 `cbor:"n"`
	Text string `cbor:"text"`
}

type echoOutput struct {
	Echo  echoInput `cbor:"echo"`
	Agent string    `cbor:"agent"`
}

// timeout bounds each exchange with the broker.
const timeout = 10 * time.Second

func main() {
	addr := flag.String("addr", "127.0.0.1:1883", "broker address")
	agentsFile := flag.String("agents", "", `JSON file of [{"id","username","password"}], one echo agent each (required)`)
	qos := flag.Int("qos", 0, "QoS of the invocations and the results (0 or 1)")
	n := flag.Int("n", 3000, "invocations timed")
	warmup := flag.Int("warmup", 200, "invocations before the timed ones")
	pid := flag.Int("pid", 0, "the broker's process id, whose CPU time is measured (0: none)")
	flag.Parse()
	if *qos < 0 || *qos > 1 || *n < 1 || *warmup < 0 || *agentsFile == "" {
		fmt.Fprintln(os.Stderr, "rrload: -agents is required; -qos must be 0 or 1; -n at least 1")
		os.Exit(2)
	}
	var agents []agent
	data, err := os.ReadFile(*agentsFile)
	if err == nil {
		err = json.Unmarshal(data, &agents)
	}
	if err == nil && len(agents) == 0 {
		err = errors.New("no agents")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rrload: -agents:", err)
		os.Exit(2)
	}
	res, err := run(*addr, agents, byte(*qos), *warmup, *n, *pid)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rrload:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
}

// run connects the agents and the requester, warms up and measures.
func run(addr string, agents []agent, qos byte, warmup, n, pid int) (result, error) {
	var clients []*paho.Client
	// stop ends the agents' last answers (a QoS 1 PUBACK still on its
	// way): paho's Disconnect waits for the handler that sends them.
	ctx, stop := context.WithCancel(context.Background())
	defer func() {
		stop()
		for _, c := range clients {
			_ = c.Disconnect(&paho.Disconnect{})
		}
	}()
	for _, a := range agents {
		c, err := connectAgent(ctx, addr, a)
		if err != nil {
			return result{}, err
		}
		clients = append(clients, c)
	}
	r := &requester{agents: agents, replies: make(chan *paho.Publish, 16), qos: qos}
	r.inbox = "lmos/v1/clients/" + requesterID + "/replies"
	c, err := mqttdial.Dial(addr, &paho.Connect{ClientID: requesterID, CleanStart: true, KeepAlive: 60},
		func(p *paho.Publish) { r.replies <- p })
	if err != nil {
		return result{}, err
	}
	clients = append(clients, c)
	r.c = c
	if err := subscribe(c, r.inbox); err != nil {
		return result{}, err
	}
	for range warmup {
		if _, err := r.invoke(); err != nil {
			return result{}, err
		}
	}
	res := result{LatenciesNs: make([]int64, 0, n)}
	cpu0, err := procCPU(pid)
	if err != nil {
		return result{}, err
	}
	sw0, err := procSwitches(pid)
	if err != nil {
		return result{}, err
	}
	for range n {
		d, err := r.invoke()
		if err != nil {
			return result{}, err
		}
		res.LatenciesNs = append(res.LatenciesNs, d.Nanoseconds())
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return result{}, err
	}
	sw1, err := procSwitches(pid)
	if err != nil {
		return result{}, err
	}
	res.BrokerCPUNs = (cpu1 - cpu0).Nanoseconds()
	res.BrokerSwitches = sw1 - sw0
	return res, nil
}

// requesterID is the requester's client id.
const requesterID = "bench-requester"

// connectAgent connects a's echo agent and subscribes it to its action;
// its answers end with ctx.
func connectAgent(ctx context.Context, addr string, a agent) (*paho.Client, error) {
	cp := &paho.Connect{ClientID: "agent-" + lmos.TopicKey(a.ID), CleanStart: true, KeepAlive: 60}
	if a.Username != "" {
		cp.ClientID = "agent-" + a.Username
		cp.Username, cp.UsernameFlag = a.Username, true
		cp.Password, cp.PasswordFlag = []byte(a.Password), true
	}
	ready := make(chan struct{})
	var c *paho.Client
	c, err := mqttdial.Dial(addr, cp, func(p *paho.Publish) {
		<-ready // c is set
		echo(ctx, c, a.ID, p)
	})
	if err != nil {
		return nil, err
	}
	close(ready)
	if err := subscribe(c, "lmos/v1/things/"+lmos.TopicKey(a.ID)+"/actions/echo"); err != nil {
		_ = c.Disconnect(&paho.Disconnect{})
		return nil, err
	}
	return c, nil
}

// echo answers the invocation p on its Response Topic, at its QoS.
func echo(ctx context.Context, c *paho.Client, id string, p *paho.Publish) {
	if p.Properties == nil || p.Properties.ResponseTopic == "" {
		return
	}
	var in echoInput
	status := "completed"
	if err := cbor.Unmarshal(p.Payload, &in); err != nil {
		status = "failed"
	}
	out, _ := cbor.Marshal(echoOutput{Echo: in, Agent: id})
	props := &paho.PublishProperties{CorrelationData: p.Properties.CorrelationData, ContentType: "application/cbor"}
	props.User.Add("lmos-status", status)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, _ = c.Publish(ctx, &paho.Publish{Topic: p.Properties.ResponseTopic, QoS: p.QoS, Payload: out, Properties: props})
}

// subscribe subscribes c to filter at QoS 1 and fails unless granted.
func subscribe(c *paho.Client, filter string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if err != nil {
		return fmt.Errorf("cannot subscribe to %s: %w", filter, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
		return fmt.Errorf("subscription to %s refused: %v", filter, sa.Reasons)
	}
	return nil
}

// requester invokes the agents in turn.
type requester struct {
	c       *paho.Client
	agents  []agent
	inbox   string
	replies chan *paho.Publish
	qos     byte
	seq     uint64
}

// invoke sends the next invocation and returns the time until its result
// arrived, checked.
func (r *requester) invoke() (time.Duration, error) {
	r.seq++
	seq := r.seq
	a := r.agents[seq%uint64(len(r.agents))]
	topic := "lmos/v1/things/" + lmos.TopicKey(a.ID) + "/actions/echo"
	in, err := cbor.Marshal(echoInput{N: seq, Text: "hello agent"})
	if err != nil {
		return 0, err
	}
	corr := binary.BigEndian.AppendUint64(nil, seq)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := r.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: r.qos, Payload: in,
		Properties: &paho.PublishProperties{ResponseTopic: r.inbox, CorrelationData: corr, ContentType: "application/cbor"}}); err != nil {
		return 0, fmt.Errorf("cannot invoke %s: %w", topic, err)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case p := <-r.replies:
			if p.Properties == nil || !bytes.Equal(p.Properties.CorrelationData, corr) {
				continue // a late reply of an earlier, failed invocation
			}
			d := time.Since(start)
			var out echoOutput
			if st := p.Properties.User.Get("lmos-status"); st != "completed" {
				return 0, fmt.Errorf("result status %q", st)
			}
			if p.Properties.ContentType != "application/cbor" || cbor.Unmarshal(p.Payload, &out) != nil || out.Echo.N != seq || out.Agent != a.ID {
				return 0, fmt.Errorf("bad result %x", p.Payload)
			}
			return d, nil
		case <-deadline.C:
			return 0, fmt.Errorf("no result for invocation %d of %s within %s", seq, topic, timeout)
		}
	}
}

// procCPU is the CPU time (user + system) process pid used so far, from
// /proc/{pid}/stat in clock ticks (100 per second on Linux); 0 for pid 0.
func procCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cannot read the broker's CPU time: %w", err)
	}
	// Fields after the command name, which is in parentheses: utime is
	// field 14, stime 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("cannot parse /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cannot parse /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// procSwitches is the sum of the voluntary context switches of process
// pid's threads so far, from /proc; 0 for pid 0.
func procSwitches(pid int) (int64, error) {
	if pid == 0 {
		return 0, nil
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("cannot read the broker's threads: %w", err)
	}
	var sum int64
	for _, t := range tasks {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("cannot parse /proc/%d/task/%s/status", pid, t.Name())
				}
				sum += n
			}
		}
	}
	return sum, nil
}
