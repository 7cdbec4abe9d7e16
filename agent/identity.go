package agent

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Files in Options.StateDir.
const (
	// KeyFileName is the agent's key (PROTOCOL §6 key file, mode 0600).
	KeyFileName = "key.json"
	// lastProofFile holds the created time of the last proof signed, so
	// the next one is later even when the clock went back across a
	// restart (a Raspberry Pi without a real-time clock boots at the time
	// it last saved, and a LAN without internet may never correct it).
	lastProofFile = "last-proof"
)

// signer signs the agent's TD for each join, every proof's created later
// than the one before (the hub refuses a replay: a proof not newer than
// the one it holds).
type signer struct {
	priv ed25519.PrivateKey
	did  string
	now  func() time.Time
	log  *slog.Logger

	mu       sync.Mutex
	last     time.Time
	lastPath string // "" without a state directory
}

// newSigner loads the key the options name: Options.Key, else the one in
// StateDir (made on first use); with neither, the agent does not sign.
func newSigner(opts Options, log *slog.Logger) (*signer, error) {
	s := &signer{priv: opts.Key, now: time.Now, log: log}
	if opts.StateDir != "" {
		s.lastPath = filepath.Join(opts.StateDir, lastProofFile)
		if s.priv == nil {
			priv, created, err := proof.LoadOrCreateKey(filepath.Join(opts.StateDir, KeyFileName))
			if err != nil {
				return nil, fmt.Errorf("the agent's key: %w", err)
			}
			if created {
				log.Info("created the agent's key", "did", proof.DID(priv.Public().(ed25519.PublicKey)), "dir", opts.StateDir)
			}
			s.priv = priv
		}
		if b, err := os.ReadFile(s.lastPath); err == nil {
			if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b))); err == nil {
				s.last = t
			}
		}
	}
	if s.priv == nil {
		// No key it could keep: signing with one made for this run would
		// bind the id to a key lost at the next start, and the hub would
		// then refuse the agent's own id (PROTOCOL §6). It joins unsigned,
		// as unverified, until it is given a place to keep its key.
		log.Info("the agent joins unsigned: set Options.StateDir (or Options.Key) to sign its TD with a key it keeps")
		return s, nil
	}
	if len(s.priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("Options.Key is %d bytes, not an Ed25519 private key", len(s.priv))
	}
	s.did = proof.DID(s.priv.Public().(ed25519.PublicKey))
	return s, nil
}

// sign returns doc with a fresh proof: created is now, to the millisecond,
// or a millisecond after the last proof when the clock has not moved past
// it (two joins in one millisecond, or a clock set back).
func (s *signer) sign(doc []byte) ([]byte, error) {
	if s.priv == nil {
		return doc, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.now().UTC().Truncate(time.Millisecond)
	if !t.After(s.last) {
		t = s.last.Add(time.Millisecond)
	}
	out, err := proof.SignMilli(doc, s.priv, t)
	if err != nil {
		return nil, fmt.Errorf("cannot sign the Thing Description: %w", err)
	}
	s.last = t
	if s.lastPath != "" {
		if err := writeFileAtomic(s.lastPath, []byte(t.Format(time.RFC3339Nano)+"\n")); err != nil {
			// The proof is still good; only a clock set back across a
			// restart could then repeat a created time.
			s.log.Warn("cannot keep the time of the last proof", "err", err)
		}
	}
	return out, nil
}

// writeFileAtomic replaces path with data (mode 0600): written aside and
// synced, then renamed, and the directory synced, so that after a power
// cut the file holds the old data or the new.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync() // not every system syncs a directory
		d.Close()
	}
	return nil
}

// DID returns the agent's did:key, whose key signs its TD on every join;
// "" when it has no key (no Options.StateDir or Options.Key) and joins
// unsigned.
func (a *Agent) DID() string { return a.signer.did }

// signedTD is the TD to join with: signed anew for each join.
func (a *Agent) signedTD() ([]byte, error) { return a.signer.sign(a.td.doc) }
