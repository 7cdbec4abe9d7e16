package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// runDiscover browses mDNS for a while and prints the hubs and Things it
// saw: a person's first tool when an agent does not show up.
func runDiscover(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("discover", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to listen")
	ifaces := fs.String("interfaces", "", "comma-separated interfaces to browse on (default: every LAN interface)")
	pin := fs.Bool("pin", false, "connect to each TLS hub, check that its certificate is the one its TXT record names, and pin it in --known-hubs (trust on first use, like ssh)")
	known := fs.String("known-hubs", defaultKnownHubs(), "the `FILE` of pinned hub certificates")
	fs.Usage = func() {} // the flag package calls it on every error
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stdout, "usage: lmos-hub discover [--timeout 3s] [--interfaces eth0,wlan0] [--pin [--known-hubs FILE]]\n\n"+
				"Browses mDNS (_wot._tcp, _mqtt._tcp, _secure-mqtt._tcp) and prints the hubs and Things on the LAN,\n"+
				"with each TLS hub's certificate fingerprint (TXT tls=).\n\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return exitOK
		}
		return cliargs.UsageErr(stderr, "discover", err.Error())
	}
	if fs.NArg() > 0 || *timeout <= 0 {
		return cliargs.UsageErr(stderr, "discover", "discover takes only --timeout (> 0), --interfaces, --pin and --known-hubs")
	}
	var names []string
	for _, n := range strings.Split(*ifaces, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	b, err := dnssd.Browse(dnssd.BrowserConfig{
		Types:      []string{lmos.ServiceWoT, lmos.ServiceMQTT, lmos.ServiceSecureMQTT},
		Interfaces: names,
		Logger:     slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	time.Sleep(*timeout)
	entries := b.Entries()
	b.Close()
	printDiscovered(stdout, entries)
	if *pin {
		return pinHubs(stdout, stderr, entries, *known)
	}
	return exitOK
}

func printDiscovered(w io.Writer, entries []dnssd.Entry) {
	brokers := map[string]string{} // instance → mqtt URL
	secure := map[string]string{}  // instance → mqtts URL
	for _, e := range entries {
		if e.Service == lmos.ServiceMQTT && len(e.IPs) > 0 {
			brokers[e.Instance] = "mqtt://" + net.JoinHostPort(hostOf(e), strconv.Itoa(e.Port))
		}
		if e.Service == lmos.ServiceSecureMQTT && len(e.IPs) > 0 {
			secure[e.Instance] = "mqtts://" + net.JoinHostPort(hostOf(e), strconv.Itoa(e.Port))
		}
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	var hubs, things []string
	for _, e := range entries {
		if e.Service != lmos.ServiceWoT {
			continue
		}
		u, err := e.TDURL()
		if err != nil {
			u = "(" + err.Error() + ")"
		}
		typ := e.TXT()[lmos.TXTType]
		if strings.EqualFold(typ, lmos.TypeDirectory) {
			b := brokers[e.Instance]
			if b == "" {
				b = "-"
			}
			tlsCol := "-"
			if fp := e.TXT()[lmos.TXTTLS]; fp != "" {
				tlsCol = fp
				if s := secure[e.Instance]; s != "" {
					tlsCol = s + " " + fp
				}
			}
			hubs = append(hubs, fmt.Sprintf("  %s\t%s\t%s\t%s\t%s", e.Instance, u, b, e.Iface, tlsCol))
		} else {
			if typ == "" {
				typ = lmos.TypeThing
			}
			things = append(things, fmt.Sprintf("  %s\t%s\t%s\t%s", e.Instance, typ, u, e.Iface))
		}
	}
	fmt.Fprintf(tw, "HUBS (%d)\n", len(hubs))
	if len(hubs) > 0 {
		fmt.Fprintln(tw, "  NAME\tDIRECTORY\tMQTT\tIFACE\tTLS")
		for _, l := range hubs {
			fmt.Fprintln(tw, l)
		}
	}
	fmt.Fprintf(tw, "THINGS (%d)\n", len(things))
	if len(things) > 0 {
		fmt.Fprintln(tw, "  NAME\tTYPE\tTD\tIFACE")
		for _, l := range things {
			fmt.Fprintln(tw, l)
		}
	}
	tw.Flush()
	if len(hubs)+len(things) == 0 {
		fmt.Fprintln(w, "nothing seen: is the hub on this LAN, with mDNS on (--mdns=true)? Multicast may be filtered (Wi-Fi client isolation, firewall on UDP 5353).")
	}
}

func hostOf(e dnssd.Entry) string {
	ip := e.IPs[0]
	if ip.To4() == nil && ip.IsLinkLocalUnicast() {
		return ip.String() + "%" + e.Iface
	}
	return ip.String()
}
