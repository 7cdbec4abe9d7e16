package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// defaultKnownHubs is where `discover --pin` keeps pinned certificates.
func defaultKnownHubs() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "lmos-hub-known-hubs"
	}
	return filepath.Join(dir, "lmos-hub", "known_hubs")
}

// pinHubs connects to the TLS door of every hub whose TXT record names a
// certificate (tls=): its _secure-mqtt._tcp broker, else its directory
// when that is https. The certificate presented must be the one the TXT
// record names (else something else answers on the LAN) and, once pinned
// in file, the pinned one (as ssh's known_hosts); a hub seen for the first
// time is pinned. Any mismatch fails the command.
func pinHubs(stdout, stderr io.Writer, entries []dnssd.Entry, file string) int {
	known, err := readKnownHubs(file)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	code := exitOK
	for _, e := range entries {
		if e.Service != lmos.ServiceWoT || !strings.EqualFold(e.TXT()[lmos.TXTType], lmos.TypeDirectory) {
			continue
		}
		txtFP := e.TXT()[lmos.TXTTLS]
		if txtFP == "" {
			continue
		}
		addr := tlsDoor(e, entries)
		if addr == "" {
			fmt.Fprintf(stdout, "PIN %s: no TLS door advertised (no %s, directory not https)\n", e.Instance, lmos.ServiceSecureMQTT)
			code = exitFailure
			continue
		}
		want, err := lmos.ParseFingerprint(txtFP)
		if err != nil {
			fmt.Fprintf(stdout, "PIN %s: the TXT record's %s: %v\n", e.Instance, lmos.TXTTLS, err)
			code = exitFailure
			continue
		}
		got, err := presented(addr)
		if err != nil {
			fmt.Fprintf(stdout, "PIN %s: cannot connect to %s: %v\n", e.Instance, addr, err)
			code = exitFailure
			continue
		}
		switch pinned, ok := known[e.Instance]; {
		case got != want:
			fmt.Fprintf(stdout, "PIN %s: MISMATCH: %s presents %s but the hub's TXT record names %s; not pinned\n", e.Instance, addr, got, want)
			code = exitFailure
		case ok && pinned != got:
			fmt.Fprintf(stdout, "PIN %s: CHANGED: %s presents %s, pinned is %s (%s); if the hub's certificate was replaced on purpose, delete its line\n",
				e.Instance, addr, got, pinned, file)
			code = exitFailure
		case ok:
			fmt.Fprintf(stdout, "PIN %s: ok, %s presents the pinned certificate %s\n", e.Instance, addr, got)
		default:
			if err := appendKnownHub(file, e.Instance, got); err != nil {
				fmt.Fprintln(stderr, "error:", err)
				return exitFailure
			}
			known[e.Instance] = got
			fmt.Fprintf(stdout, "PIN %s: pinned %s on first use (%s)\n", e.Instance, got, file)
		}
	}
	return code
}

// tlsDoor is host:port of the hub's TLS door: its secure broker, else its
// directory when advertised as https.
func tlsDoor(dir dnssd.Entry, entries []dnssd.Entry) string {
	for _, e := range entries {
		if e.Service == lmos.ServiceSecureMQTT && e.Instance == dir.Instance && len(e.IPs) > 0 {
			return net.JoinHostPort(hostOf(e), strconv.Itoa(e.Port))
		}
	}
	if strings.EqualFold(dir.TXT()[lmos.TXTScheme], "https") && len(dir.IPs) > 0 {
		return net.JoinHostPort(hostOf(dir), strconv.Itoa(dir.Port))
	}
	return ""
}

// presented is the fingerprint of the certificate the TLS server at addr
// presents.
func presented(addr string) (string, error) {
	var got string
	cfg := lmos.PinnedConfig(func(fp string) error { got = fp; return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	c.Close()
	return got, nil
}

// readKnownHubs reads lines "<hub name>\t<fingerprint>"; a missing file is
// empty.
func readKnownHubs(file string) (map[string]string, error) {
	out := map[string]string{}
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, fp, ok := strings.Cut(line, "\t")
		canon, err := lmos.ParseFingerprint(fp)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s line %d: want \"<hub name><TAB><fingerprint>\"", file, n)
		}
		out[name] = canon
	}
	return out, sc.Err()
}

func appendKnownHub(file, name, fp string) error {
	if strings.ContainsAny(name, "\t\n\r") {
		return fmt.Errorf("cannot pin hub %q: its name holds a tab or line break", name)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s\t%s\n", name, fp)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
