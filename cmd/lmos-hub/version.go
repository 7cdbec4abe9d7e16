package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/internal/tlscert"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

const versionUsage = `usage: lmos-hub version [--tls [--config FILE] [--data-dir DIR] [--tls-cert FILE]]
       lmos-hub --version

Prints the version. With --tls, also the TLS certificate the hub serves (or
would serve) and its fingerprint, read from its file without starting a hub,
to compare with what an agent or browser shows.
`

// runVersion prints the version; with --tls, the certificate the hub
// serves (or would serve): the configured tls.cert, else the self-signed
// one in the data directory, read from its file without starting a hub, so
// a person can compare the fingerprint with what an agent or browser shows.
func runVersion(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	withTLS := false
	var rest []string
	for _, a := range args {
		if a == "--tls" || a == "-tls" {
			withTLS = true
			continue
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, versionUsage)
			return exitOK
		}
		rest = append(rest, a)
	}
	if !withTLS && len(rest) > 0 {
		return cliargs.UsageErr(stderr, "version", fmt.Sprintf("unexpected %q: version takes only --tls (and, with it, the serve flags that locate the certificate)", rest[0]))
	}
	var cfg app.Config
	if withTLS {
		var err error
		if cfg, err = app.LoadConfig(rest, getenv); err != nil {
			return configErr(stderr, "version", err)
		}
	}
	fmt.Fprintln(stdout, "lmos-hub", version)
	if !withTLS {
		return exitOK
	}
	file := cfg.TLS.Cert
	if file == "" {
		file = filepath.Join(cfg.DataDir, tlscert.CertFile)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "error: no tls certificate: %v (the hub generates one on its first start with --tls)\n", err)
		return exitFailure
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		fmt.Fprintf(stderr, "error: %s holds no PEM certificate\n", file)
		return exitFailure
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		fmt.Fprintf(stderr, "error: %s: %v\n", file, err)
		return exitFailure
	}
	var names []string
	names = append(names, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	fmt.Fprintf(stdout, "tls certificate  %s\nfingerprint      %s\nnames            %s\nvalid until      %s\n",
		file, lmos.Fingerprint(cert.Raw), strings.Join(names, ", "), cert.NotAfter.UTC().Format(time.RFC3339))
	return exitOK
}
