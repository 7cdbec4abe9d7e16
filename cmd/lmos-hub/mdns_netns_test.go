package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/internal/tlscert"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// The tests here run hubs and agents in network namespaces joined by a
// bridge (test/kit/netnstest): real multicast that never leaves the test's
// own links. Each process is this test binary re-executed in a namespace.

const childEnv = "LMOS_MDNS_CHILD"

// TestMDNSChild is not a test: the namespace tests re-execute the binary
// to run a hub, an agent, discover or FindHub inside a namespace.
func TestMDNSChild(t *testing.T) {
	c := netnstest.StartChild(t, childEnv)
	args := strings.Split(os.Getenv("LMOS_MDNS_ARGS"), "|")
	log := c.Log
	switch c.Mode {
	case "run": // the hub, discover: the real command line
		os.Exit(run(args, strings.NewReader(""), os.Stdout, os.Stderr, os.Getenv))
	case "findhub":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h, err := agent.FindHub(ctx, agent.FindOptions{Interfaces: []string{"eth0"}, Logger: log})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		json.NewEncoder(os.Stdout).Encode(h)
		os.Exit(0)
	case "agents": // args: n; starts n agents at "go", re-announces them every second at "reannounce"
		n, _ := strconv.Atoi(args[0])
		runAgents(n, log)
	case "failoveragent": // args: id
		runFailoverAgent(c, args)
	case "directory": // args: name|port
		runFakeDirectory(c, args)
	case "zeroconf": // args: id|title|port
		runZeroconfAgent(c, args)
	case "unicast-announce": // args: id|title|port|destination
		runUnicastAnnounce(args)
	case "agent": // args: id|title|ttl-seconds
		ttl, _ := strconv.Atoi(args[2])
		start := time.Now()
		a, err := agent.Advertise(context.Background(), agent.AdvertiseOptions{
			TD: hubtest.BareTD(args[0], args[1]), Addr: ":8000", Interfaces: []string{"eth0"}, TTL: time.Duration(ttl) * time.Second, Logger: log})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("advertised %s %d %d\n", a.Name(), time.Now().UnixNano(), start.UnixNano())
		c.Serve(func(l string) {
			if title, ok := strings.CutPrefix(l, "title "); ok {
				a.SetTD(hubtest.BareTD(args[0], title))
				fmt.Println("retitled", title)
			}
		}, func() { a.Close() })
	}
	os.Exit(2)
}

// mdnsHub starts a hub in node with mDNS on eth0 and waits until it serves.
func mdnsHub(t *testing.T, lan *netnstest.LAN, node, name string) (*netnstest.Proc, string) {
	t.Helper()
	return startMDNSHub(t, t.TempDir(), lan, node, name)
}

func mdnsHubB(b *testing.B, lan *netnstest.LAN, name string) (*netnstest.Proc, string) {
	b.Helper()
	return startMDNSHub(b, b.TempDir(), lan, "hub", name)
}

func startMDNSHub(t testing.TB, dir string, lan *netnstest.LAN, node, name string) (*netnstest.Proc, string) {
	t.Helper()
	return startMDNSHubWith(t, dir, lan, node, name, "")
}

// startMDNSHubWith is startMDNSHub with more YAML settings.
func startMDNSHubWith(t testing.TB, dir string, lan *netnstest.LAN, node, name, extraYAML string) (*netnstest.Proc, string) {
	t.Helper()
	cfg := filepath.Join(dir, "hub.yaml")
	yaml := "mdns:\n  interfaces: [eth0]\n  forgetAfter: 1h\n" + extraYAML
	if _, bench := t.(*testing.B); bench {
		// The benchmarks' 100 agents share one address: more than the
		// default registry.maxThingsPerSource (64) allows.
		yaml += "registry:\n  maxThingsPerSource: 0\n"
	}
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := lan.Helper(node, "TestMDNSChild", childEnv+"=run", "LMOS_MDNS_ARGS="+strings.Join([]string{"serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", "0.0.0.0:8080", "--mqtt-addr", "0.0.0.0:1883", "--admin-token", testToken, "--hub-name", name}, "|"))
	base := "http://" + lan.Addr(node) + ":8080"
	c := lan.HTTPClient(node)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the hub in %s does not serve", node)
		}
		resp, err := c.Get(base + "/healthz")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
	}
	return p, base
}

// thingState reads a Thing from the hub in node: its title and its
// presence and origin as the enriched TD shows them.
type thingState struct {
	status   int
	Title    string                  `json:"title"`
	Origin   struct{ Source string } `json:"lmos:origin"`
	Presence struct{ Status string } `json:"lmos:presence"`
}

func getThing(t *testing.T, c *http.Client, base, id string) thingState {
	t.Helper()
	var s thingState
	resp, err := c.Get(base + "/things/" + url.PathEscape(id))
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	s.status = resp.StatusCode
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
	}
	return s
}

// mdnsStatus is GET /api/status's mdns member of the hub at base.
func mdnsStatus(t *testing.T, c *http.Client, base string) (st struct {
	State, Name, Host string
	Interfaces        []string
	Seen              int
}) {
	t.Helper()
	resp, err := c.Get(base + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct{ MDNS json.RawMessage }
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if err := json.Unmarshal(doc.MDNS, &st); err != nil {
		t.Fatalf("mdns %s: %v", doc.MDNS, err)
	}
	return st
}

func TestMDNSLAN(t *testing.T) {
	lan := netnstest.New(t, []string{"hub", "a1", "a2"}, "a2")
	hubProc, base := mdnsHub(t, lan, "hub", "Test Hub")
	c := lan.HTTPClient("hub")
	hubIP := lan.Addr("hub")

	t.Run("hub found", func(t *testing.T) {
		d := lan.Helper("a1", "TestMDNSChild", childEnv+"=run", "LMOS_MDNS_ARGS=discover|--timeout|2s|--interfaces|eth0")
		d.WaitContains(10*time.Second, "Test Hub", "http://"+hubIP+":8080/.well-known/wot", "mqtt://"+hubIP+":1883")
		f := lan.Helper("a2", "TestMDNSChild", childEnv+"=findhub")
		f.WaitContains(10*time.Second, `"Name":"Test Hub"`, `"BrokerURL":"mqtt://`+hubIP+`:1883"`)
		// Found: so advertising, on eth0, its own directory seen.
		st := mdnsStatus(t, c, base)
		if st.State != "advertising" || st.Name != "Test Hub" || !strings.HasSuffix(st.Host, ".local") ||
			len(st.Interfaces) != 1 || st.Interfaces[0] != "eth0" || st.Seen < 1 {
			t.Errorf("/api/status mdns %+v", st)
		}
	})

	a1 := lan.Helper("a1", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS=urn:test:a1|Lamp|0")
	a1.WaitContains(10*time.Second, "advertised")
	t.Run("announced then registered", func(t *testing.T) {
		testwait.Eventually(t, 10*time.Second, "a1 registered online", func() bool {
			s := getThing(t, c, base, "urn:test:a1")
			return s.status == 200 && s.Origin.Source == "mdns" && s.Presence.Status == "online"
		})
		// Counted and logged: the hub's announcements, the registration,
		// the join on the mDNS door; /healthz says mDNS is up.
		for series, least := range map[string]float64{"lmos_mdns_announcements_total": 1,
			`lmos_mdns_things_total{result="registered"}`: 1, `lmos_joins_total{door="mdns",status="accepted"}`: 1,
			`lmos_presence_things{status="online"}`: 1} {
			if v := metricIn(t, c, base, series); v < least {
				t.Errorf("%s = %v, want at least %v", series, v, least)
			}
		}
		hubProc.WaitContains(5*time.Second, "join accepted", "door=mdns", "urn:test:a1")
		var health struct {
			Status     string
			Components map[string]string
		}
		getJSONIn(t, c, base+"/healthz", &health)
		if health.Status != "up" || health.Components["mdns"] != "up" {
			t.Errorf("/healthz %+v", health)
		}
	})
	t.Run("TXT change re-fetches", func(t *testing.T) {
		a1.Send("title Brighter")
		a1.WaitContains(5*time.Second, "retitled")
		testwait.Eventually(t, 10*time.Second, "the new title", func() bool { return getThing(t, c, base, "urn:test:a1").Title == "Brighter" })
	})
	t.Run("spoofed id from another host refused", func(t *testing.T) {
		evil := lan.Helper("a2", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS=urn:test:a1|Evil|0")
		evil.WaitContains(10*time.Second, "advertised")
		hubProc.WaitContains(10*time.Second, "mdns thing refused", "Evil", "bound to another mDNS instance")
		if got := getThing(t, c, base, "urn:test:a1"); got.Title != "Brighter" || got.Presence.Status != "online" {
			t.Errorf("after the spoof: %+v", got)
		}
		evil.Stop()
	})
	t.Run("address change re-fetches", func(t *testing.T) {
		old := lan.Addr("a1")
		moved := old[:strings.LastIndexByte(old, '.')+1] + "200"
		// Deleted first: deleting a primary address deletes its secondaries.
		for _, args := range [][]string{{"addr", "del", old + "/16", "dev", "eth0"}, {"addr", "add", moved + "/16", "dev", "eth0"}} {
			if out, err := exec.Command("ip", append([]string{"-n", lan.NS("a1")}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v %s", args, err, out)
			}
		}
		// The agent notices within its 2 s interface poll and announces
		// its new address; the hub fetches the TD from there.
		hubProc.WaitContains(15*time.Second, "mdns thing registered", "urn:test:a1", "http://"+moved+":8000/")
	})
	t.Run("goodbye makes offline", func(t *testing.T) {
		a1.Stop()
		testwait.Eventually(t, 10*time.Second, "a1 offline", func() bool { return getThing(t, c, base, "urn:test:a1").Presence.Status == "offline" })
	})
	t.Run("TTL expiry makes offline", func(t *testing.T) {
		a2 := lan.Helper("a2", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS=urn:test:a2|Fan|2")
		a2.WaitContains(10*time.Second, "advertised")
		testwait.Eventually(t, 10*time.Second, "a2 online", func() bool { return getThing(t, c, base, "urn:test:a2").Presence.Status == "online" })
		a2.Kill() // no goodbye
		testwait.Eventually(t, 15*time.Second, "a2 offline", func() bool { return getThing(t, c, base, "urn:test:a2").Presence.Status == "offline" })
	})
	t.Run("two hubs with one name", func(t *testing.T) {
		_, base2 := mdnsHub(t, lan, "a2", "Test Hub")
		d := lan.Helper("a1", "TestMDNSChild", childEnv+"=run", "LMOS_MDNS_ARGS=discover|--timeout|2s|--interfaces|eth0")
		d.WaitContains(10*time.Second, "HUBS (2)")
		d.WaitContains(5*time.Second, "Test Hub (2)", lan.Addr("a2"))
		// The status names the instance as renamed.
		if st := mdnsStatus(t, c, base2); st.State != "advertising" || st.Name != "Test Hub (2)" {
			t.Errorf("the second hub's /api/status mdns %+v", st)
		}
	})
}

// TestMDNSTLSHubPinnedByDiscover: a hub serving TLS only advertises its
// directory as https and MQTTS as _secure-mqtt._tcp, both with its
// certificate's fingerprint in TXT (tls=); `lmos-hub discover --pin` on
// another host lists them, connects, finds the certificate the TXT record
// names and pins it, and the next run finds it unchanged; agent.FindHub
// reads the https directory trusting that certificate and returns the
// mqtts broker with the fingerprint. A new certificate written to the data
// directory is reloaded and announced: discover lists the new fingerprint
// and reports the pinned one CHANGED.
func TestMDNSTLSHubPinnedByDiscover(t *testing.T) {
	lan := netnstest.New(t, []string{"hub", "a1"})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hub.yaml")
	yaml := "mdns:\n  interfaces: [eth0]\ntls:\n  enabled: true\n  only: true\n  mqttsAddr: 0.0.0.0:8883\n  httpsAddr: 0.0.0.0:8443\n  reloadInterval: 100ms\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	hub := lan.Helper("hub", "TestMDNSChild", childEnv+"=run", "LMOS_MDNS_ARGS="+strings.Join([]string{"serve", "--config", cfg,
		"--data-dir", filepath.Join(dir, "data"), "--admin-token", testToken, "--hub-name", "TLS Hub"}, "|"))
	hub.WaitContains(10*time.Second, "mdns advertising", "http_port=8443", "mqtt_port=0", "mqtts_port=8883")
	pem, err := os.ReadFile(filepath.Join(dir, "data", "tls-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	der, _ := pemDecode(pem)
	fp := lmos.Fingerprint(der)
	hubIP := lan.Addr("hub")
	known := filepath.Join(t.TempDir(), "known_hubs")
	args := "LMOS_MDNS_ARGS=discover|--timeout|2s|--interfaces|eth0|--pin|--known-hubs|" + known
	d := lan.Helper("a1", "TestMDNSChild", childEnv+"=run", args)
	d.WaitContains(10*time.Second, "TLS Hub", "https://"+hubIP+":8443/.well-known/wot", "mqtts://"+hubIP+":8883 "+fp)
	d.WaitContains(10*time.Second, "PIN TLS Hub: pinned "+fp)
	d = lan.Helper("a1", "TestMDNSChild", childEnv+"=run", args)
	d.WaitContains(10*time.Second, "PIN TLS Hub: ok")
	f := lan.Helper("a1", "TestMDNSChild", childEnv+"=findhub")
	f.WaitContains(10*time.Second, `"BrokerURL":"mqtts://`+hubIP+`:8883"`, `"TLSFingerprint":"`+fp+`"`)

	// A new certificate in the data directory: the hub reloads it and
	// announces the new fingerprint; discover sees the pinned one changed.
	certPEM, keyPEM, err := tlscert.Generate(tlscert.HostNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"tls-key.pem", keyPEM}, {"tls-cert.pem", certPEM}} {
		if err := os.WriteFile(filepath.Join(dir, "data", f.name), f.data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	der, _ = pemDecode(certPEM)
	fp2 := lmos.Fingerprint(der)
	hub.WaitContains(10*time.Second, "tls certificate reloaded", fp2)
	d = lan.Helper("a1", "TestMDNSChild", childEnv+"=run", args)
	d.WaitContains(10*time.Second, "mqtts://"+hubIP+":8883 "+fp2)
	d.WaitContains(10*time.Second, "PIN TLS Hub: CHANGED", fp2, "pinned is "+fp)
}

// TestMDNSNodeInterop: an agent written with npm multicast-dns, sending
// with IP TTL 1 (what many stacks send; RFC 6762 only says SHOULD 255),
// registers with the hub, finds the hub's directory with its TXT in
// contract order in the answer to its query, and goes offline on its
// goodbye.
func TestMDNSNodeInterop(t *testing.T) {
	script := hubtest.InteropScript(t, "mdns-agent.mjs", "multicast-dns")
	lan := netnstest.New(t, []string{"hub", "node"})
	hub, base := mdnsHub(t, lan, "hub", "Node Test Hub")
	c := lan.HTTPClient("hub")
	// The agent starts after the hub's two start-up announcements (0 and
	// 1 s after its probing), so the directory it prints was the answer to
	// its own query.
	hub.WaitContains(10*time.Second, "mdns advertising")
	time.Sleep(1500 * time.Millisecond)
	cmd := lan.Command("node", "node", script, "urn:test:node", "Node Lamp", lan.Addr("node"), "8001")
	cmd.Env = append(os.Environ(), "MDNS_TTL=1")
	n := lan.Start(cmd)
	n.WaitContains(10*time.Second, `"announced"`)
	n.WaitContains(10*time.Second, `"directory":"Node Test Hub._wot._tcp.local"`, `"port":8080`,
		`"txt":["td=/.well-known/wot","type=Directory","scheme=http"]`)
	testwait.Eventually(t, 10*time.Second, "the node agent registered online", func() bool {
		s := getThing(t, c, base, "urn:test:node")
		return s.status == 200 && s.Origin.Source == "mdns" && s.Presence.Status == "online"
	})
	n.Stop()
	testwait.Eventually(t, 10*time.Second, "the node agent offline", func() bool { return getThing(t, c, base, "urn:test:node").Presence.Status == "offline" })
}

// TestMDNSAvahiInterop: a Thing published by Avahi (a static service
// file, avahi-daemon in its own namespace, its /etc/avahi bind-mounted by
// ip netns exec from /etc/netns/<ns>/avahi, on a private D-Bus) registers
// with the hub; avahi-browse finds the hub's directory, by type and by
// subtype; the Thing goes offline when Avahi stops (its goodbyes).
func TestMDNSAvahiInterop(t *testing.T) {
	daemon := requireAvahi(t)
	lan := netnstest.New(t, []string{"hub", "avahi"})
	_, base := mdnsHub(t, lan, "hub", "Avahi Test Hub")
	c := lan.HTTPClient("hub")
	dbusEnv, av := startAvahi(t, lan, "avahi", daemon, "urn:test:avahi", "Avahi Lamp")
	testwait.Eventually(t, 15*time.Second, "the Avahi Thing registered online", func() bool {
		s := getThing(t, c, base, "urn:test:avahi")
		return s.status == 200 && s.Origin.Source == "mdns" && s.Presence.Status == "online"
	})
	for _, typ := range []string{"_wot._tcp", "_directory._sub._wot._tcp"} {
		out := avahiBrowse(t, lan, "avahi", dbusEnv, typ)
		// avahi-browse escapes spaces as \032 and lists TXT strings in
		// reverse wire order: the Lamp's service file says td, type.
		hub := "=;eth0;IPv4;Avahi\\032Test\\032Hub;_wot._tcp;local;"
		var found bool
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, hub) && strings.HasSuffix(line, ";"+lan.Addr("hub")+`;8080;"scheme=http" "type=Directory" "td=/.well-known/wot"`) {
				found = true
			}
			if typ == "_wot._tcp" && strings.HasPrefix(line, "=;eth0;IPv4;Avahi\\032Lamp;") && !strings.HasSuffix(line, `"type=Thing" "td=/avahi.td.json"`) {
				t.Errorf("avahi-browse lists TXT strings in another order than assumed: %s", line)
			}
		}
		if !found {
			t.Errorf("avahi-browse %s did not resolve the hub's directory", typ)
		}
	}
	av.Stop()
	testwait.Eventually(t, 10*time.Second, "the Avahi Thing offline", func() bool { return getThing(t, c, base, "urn:test:avahi").Presence.Status == "offline" })
}

// requireAvahi returns the path of avahi-daemon, or skips (fails with
// LMOS_INTEROP=1) without it or avahi-browse.
func requireAvahi(t testing.TB) string {
	t.Helper()
	daemon, err := exec.LookPath("avahi-daemon")
	if err == nil {
		_, err = exec.LookPath("avahi-browse")
	}
	if err != nil {
		if os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("avahi-daemon or avahi-browse not installed (scripts/test-deps.sh installs them): %v", err)
		}
		t.Skip("avahi-daemon or avahi-browse not installed; `make test` installs them")
	}
	return daemon
}

// startAvahi runs avahi-daemon in node (its /etc/avahi bind-mounted by ip
// netns exec from /etc/netns/<ns>/avahi, on a private D-Bus) publishing a
// Thing from a static service file, its TD served by Python's http.server
// on port 8002. It returns the D-Bus environment for avahi-browse.
func startAvahi(t testing.TB, lan *netnstest.LAN, node, daemon, id, title string) (string, *netnstest.Proc) {
	t.Helper()
	etc := filepath.Join("/etc/netns", lan.NS(node), "avahi")
	if err := os.MkdirAll(filepath.Join(etc, "services"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(etc)) })
	// A private system bus: avahi-browse talks to avahi-daemon over D-Bus.
	bus := filepath.Join(t.TempDir(), "bus")
	busConf := filepath.Join(t.TempDir(), "bus.conf")
	if err := os.WriteFile(busConf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path=`+bus+`</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>
<allow send_type="method_call"/><allow send_type="signal"/><allow send_requested_reply="true"/></policy></busconfig>`), 0o644); err != nil {
		t.Fatal(err)
	}
	dbusEnv := "DBUS_SYSTEM_BUS_ADDRESS=unix:path=" + bus
	conf := "[server]\nhost-name=avahi-lamp\nuse-ipv4=yes\nuse-ipv6=no\nallow-interfaces=eth0\nenable-dbus=yes\n" +
		"[wide-area]\nenable-wide-area=no\n[publish]\npublish-hinfo=no\npublish-workstation=no\n"
	service := `<?xml version="1.0" standalone='no'?><!DOCTYPE service-group SYSTEM "avahi-service.dtd">
<service-group><name>` + title + `</name><service><type>_wot._tcp</type><port>8002</port>
<txt-record>td=/avahi.td.json</txt-record><txt-record>type=Thing</txt-record></service></service-group>`
	for name, body := range map[string]string{"avahi-daemon.conf": conf, "services/lamp.service": service} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	www := t.TempDir()
	if err := os.WriteFile(filepath.Join(www, "avahi.td.json"), hubtest.BareTD(id, title), 0o644); err != nil {
		t.Fatal(err)
	}
	lan.Start(lan.Command(node, "python3", "-m", "http.server", "8002", "--bind", "0.0.0.0", "--directory", www))
	lan.Start(lan.Command(node, "dbus-daemon", "--config-file="+busConf, "--nofork", "--nopidfile"))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(bus); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the private bus did not start")
		}
	}
	return dbusEnv, avahiDaemon(lan, node, daemon, dbusEnv)
}

// avahiDaemon starts avahi-daemon in node, set up by startAvahi. Its PID
// file's directory (/run/avahi-daemon, fixed when avahi is built) is a
// tmpfs of the command's own: ip netns exec runs it in a mount namespace
// of its own, so a second test run beside this one starts its own daemon
// instead of finding this one's PID file ("Daemon already running").
func avahiDaemon(lan *netnstest.LAN, node, daemon, dbusEnv string) *netnstest.Proc {
	avCmd := lan.Command(node, "sh", "-c", `mkdir -p /run/avahi-daemon && mount -t tmpfs -o size=1m tmpfs /run/avahi-daemon && exec "$0" "$@"`,
		daemon, "--no-drop-root", "--no-chroot", "--no-rlimits", "--no-proc-title")
	avCmd.Env = append(os.Environ(), dbusEnv)
	return lan.Start(avCmd)
}

// avahiBrowse runs avahi-browse --resolve --terminate --parsable for typ
// in node and returns its output.
func avahiBrowse(t *testing.T, lan *netnstest.LAN, node, dbusEnv, typ string) string {
	t.Helper()
	cmd := lan.Command(node, "avahi-browse", "--resolve", "--terminate", "--parsable", "--no-db-lookup", typ)
	cmd.Env = append(os.Environ(), dbusEnv)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("avahi-browse %s: %v\n%s", typ, err, out)
	}
	t.Logf("avahi-browse %s:\n%s", typ, out)
	return string(out)
}

// TestMDNSPortTaken: a program holding UDP 5353 exclusively (no
// SO_REUSEADDR) does not stop the hub: it serves, and says why mDNS is off.
func TestMDNSPortTaken(t *testing.T) {
	lan := netnstest.New(t, []string{"hub"})
	hold := lan.Start(lan.Command("hub", "python3", "-c", `import socket, time
a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); a.bind(("", 5353))
b = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); b.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1); b.bind(("::", 5353))
print("held", flush=True); time.sleep(60)`))
	hold.WaitContains(10*time.Second, "held")
	p, base := mdnsHub(t, lan, "hub", "Blocked Hub") // serves /healthz
	p.WaitContains(5*time.Second, "mdns is off", "5353")
	// Still up, but degraded: mDNS failed, the hub serves without it.
	var health struct {
		Status     string
		Components map[string]string
	}
	if code := getJSONIn(t, lan.HTTPClient("hub"), base+"/healthz", &health); code != http.StatusOK ||
		health.Status != "degraded" || !strings.Contains(health.Components["mdns"], "5353") || health.Components["broker"] != "up" {
		t.Errorf("/healthz %d %+v", code, health)
	}
}

// metricIn reads one series of the /metrics of the hub at base (0 when
// absent).
func metricIn(t *testing.T, c *http.Client, base, series string) float64 {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// getJSONIn decodes the JSON answer of GET u into v and returns its status.
func getJSONIn(t *testing.T, c *http.Client, u string, v any) int {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp.StatusCode
}

// pemDecode returns the DER bytes of the first PEM block.
func pemDecode(b []byte) ([]byte, bool) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, false
	}
	return block.Bytes, true
}
