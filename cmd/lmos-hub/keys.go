package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

const keysUsage = `usage:
  lmos-hub keygen [-o FILE]                  make an Ed25519 did:key; print its DID
  lmos-hub sign [-key FILE] [-o OUT] TD.json|-
                                             add an eddsa-jcs-2022 proof (stdout unless -o)
  lmos-hub verify [-key FILE] TD.json|-      check the proof; print the signer's DID and created

The key file defaults to $LMOS_KEY, else $XDG_CONFIG_HOME/lmos/key.json
(~/.config/lmos/key.json). verify accepts a TD as the directory serves it
(curl …/things/{id} | lmos-hub verify -): it strips what the hub adds. With
-key it checks against that file's public key, whatever the proof names.
`

// maxSignedDocBytes bounds a document sign and verify read; the hub's own
// limit is 256 KiB by default, so this leaves room for a raised one.
const maxSignedDocBytes = 16 << 20

// defaultKeyPath is where keygen writes and sign reads when no -key is
// given: LMOS_KEY, else the user's configuration directory.
func defaultKeyPath(getenv func(string) string) string {
	if p := getenv("LMOS_KEY"); p != "" {
		return p
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return filepath.Join("lmos", "key.json")
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "lmos", "key.json")
}

func keysFlags(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// keysArgs parses the flags of keygen, sign or verify; done with an exit
// status when there is nothing to run (help asked for: the usage on
// stdout; a mistake: one line on stderr).
func keysArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, done bool) {
	pos, err := cliargs.Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, keysUsage)
		return nil, exitOK, true
	}
	if err != nil {
		return nil, keysUsageErr(stderr, fs.Name(), "%v", err), true
	}
	return pos, 0, false
}

func keysUsageErr(stderr io.Writer, cmd, format string, args ...any) int {
	return cliargs.UsageErr(stderr, cmd, fmt.Sprintf(format, args...))
}

// runKeygen writes a new key file (0600; never over an existing one) and
// prints its DID.
func runKeygen(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := keysFlags("keygen")
	out := fs.String("o", defaultKeyPath(getenv), "")
	pos, code, done := keysArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 0 {
		return keysUsageErr(stderr, "keygen", "keygen takes no arguments, got %q", pos)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		fmt.Fprintln(stderr, "error: cannot generate a key:", err)
		return exitFailure
	}
	if err := proof.WriteKeyFile(*out, priv); err != nil {
		if errors.Is(err, os.ErrExist) {
			fmt.Fprintf(stderr, "error: %s already exists; keygen never overwrites a key (remove it, or choose another file with -o)\n", *out)
		} else {
			fmt.Fprintln(stderr, "error:", err)
		}
		return exitFailure
	}
	fmt.Fprintln(stdout, proof.DID(priv.Public().(ed25519.PublicKey)))
	fmt.Fprintf(stderr, "wrote the secret key to %s (mode 0600): keep it private\n", *out)
	return exitOK
}

// runSign adds a proof by the key file's key to a document.
func runSign(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := keysFlags("sign")
	keyPath := fs.String("key", defaultKeyPath(getenv), "")
	out := fs.String("o", "", "")
	pos, code, done := keysArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 1 {
		return keysUsageErr(stderr, "sign", "sign takes exactly one file (or - for stdin), got %d arguments", len(pos))
	}
	k, err := proof.ReadKeyFile(*keyPath)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stderr, "error: no key file %s; make one with lmos-hub keygen, or name one with -key\n", *keyPath)
		return exitFailure
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	if k.Private == nil {
		fmt.Fprintf(stderr, "error: %s holds only a public key; signing needs the secret key\n", *keyPath)
		return exitFailure
	}
	doc, err := readDoc(pos[0], stdin)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	signed, err := proof.SignMilli(doc, k.Private, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "error: cannot sign %s: %v\n", pos[0], err)
		return exitFailure
	}
	signed = append(signed, '\n')
	if *out == "" {
		_, err = stdout.Write(signed)
	} else {
		err = os.WriteFile(*out, signed, 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	return exitOK
}

// runVerify checks a document's proof and prints the signer and created,
// or why it does not verify (exit 1).
func runVerify(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := keysFlags("verify")
	keyPath := fs.String("key", "", "")
	pos, code, done := keysArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 1 {
		return keysUsageErr(stderr, "verify", "verify takes exactly one file (or - for stdin), got %d arguments", len(pos))
	}
	var pub ed25519.PublicKey
	if *keyPath != "" {
		k, err := proof.ReadKeyFile(*keyPath)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitFailure
		}
		pub = k.Public
	}
	doc, err := readDoc(pos[0], stdin)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	check := func(d []byte) (proof.Result, error) {
		if pub != nil {
			return proof.VerifyWithKey(d, pub)
		}
		return proof.Verify(d)
	}
	r, err := check(doc)
	stripped := false
	if errors.Is(err, proof.ErrInvalidSignature) {
		// A TD read back from the directory carries the hub's additions
		// (PROTOCOL §3.1); the proof covers the document as submitted.
		if plain, serr := hub.StripEnrichment(doc); serr == nil {
			if r2, err2 := check(plain); err2 == nil {
				r, err, stripped = r2, nil, true
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "not verified: %s\n", verifyReason(err))
		return exitFailure
	}
	signer := r.DID
	if signer == "" {
		signer = r.Proof.VerificationMethod + " (checked with the key " + proof.PublicKeyMultibase(pub) + ")"
	}
	fmt.Fprintln(stdout, "verified")
	fmt.Fprintln(stdout, "signer: ", signer)
	if r.Proof.Created != "" {
		fmt.Fprintln(stdout, "created:", r.Proof.Created)
	}
	if stripped {
		fmt.Fprintln(stdout, "note:    the hub's additions (registration, lmos:presence, lmos:origin, lmos:verified, the discovery context) were set aside")
	}
	return exitOK
}

// verifyReason says why a proof failed in words a user acts on.
func verifyReason(err error) string {
	switch {
	case errors.Is(err, proof.ErrNoProof):
		return "the document has no proof (sign it with lmos-hub sign)"
	case errors.Is(err, proof.ErrInvalidSignature):
		return "the signature does not match: the document was changed after signing, or signed by another key (" + err.Error() + ")"
	default:
		return err.Error()
	}
}

// readDoc reads a document from file, or stdin for "-", bounded.
func readDoc(file string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	if file == "-" {
		if stdin == nil {
			return nil, errors.New("no standard input")
		}
		r = stdin
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxSignedDocBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", file, err)
	}
	if len(b) > maxSignedDocBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", file, maxSignedDocBytes)
	}
	return b, nil
}
