package proof

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// KeyFile is the JSON form of a key kept at rest (PROTOCOL §6): the
// Multikey members of a W3C verification method, with id the key's DID.
// publicKeyMultibase lets a reader check the secret it holds and lets a
// copy without the secret verify; secretKeyMultibase is the Multikey
// spelling (W3C Controlled Identifiers), privateKeyMultibase the spelling
// of the W3C vc-di-eddsa test vector's keyPair.json, read but never
// written.
type KeyFile struct {
	ID                  string `json:"id,omitempty"`
	PublicKeyMultibase  string `json:"publicKeyMultibase"`
	SecretKeyMultibase  string `json:"secretKeyMultibase,omitempty"`
	PrivateKeyMultibase string `json:"privateKeyMultibase,omitempty"`
}

// Key is a key read from a key file. Private is nil when the file holds
// only the public key.
type Key struct {
	DID     string
	Public  ed25519.PublicKey
	Private ed25519.PrivateKey
}

// maxKeyFileBytes bounds a key file before it is decoded; a real one is
// about 250 bytes.
const maxKeyFileBytes = 4 << 10

// MarshalKeyFile returns priv as a key file.
func MarshalKeyFile(priv ed25519.PrivateKey) []byte {
	pub := priv.Public().(ed25519.PublicKey)
	b, _ := json.MarshalIndent(KeyFile{
		ID:                 DID(pub),
		PublicKeyMultibase: PublicKeyMultibase(pub),
		SecretKeyMultibase: SecretKeyMultibase(priv),
	}, "", "  ")
	return append(b, '\n')
}

// ParseKeyFile reads a key file. Its members must agree: the public key is
// the secret's, and id, when present, is their DID.
func ParseKeyFile(data []byte) (Key, error) {
	if len(data) > maxKeyFileBytes {
		return Key{}, malformed("the key file is %d bytes, more than %d", len(data), maxKeyFileBytes)
	}
	var kf KeyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		return Key{}, malformed("the key file is not a JSON object with publicKeyMultibase and secretKeyMultibase: %v", err)
	}
	var k Key
	secret := kf.SecretKeyMultibase
	if secret == "" {
		secret = kf.PrivateKeyMultibase
	} else if kf.PrivateKeyMultibase != "" && kf.PrivateKeyMultibase != secret {
		return Key{}, malformed("the key file has two different secret keys")
	}
	if secret != "" {
		priv, err := ParseSecretKeyMultibase(secret)
		if err != nil {
			return Key{}, err
		}
		k.Private, k.Public = priv, priv.Public().(ed25519.PublicKey)
	}
	if kf.PublicKeyMultibase != "" {
		pub, err := ParsePublicKeyMultibase(kf.PublicKeyMultibase)
		if err != nil {
			return Key{}, err
		}
		if k.Public != nil && !k.Public.Equal(pub) {
			return Key{}, malformed("publicKeyMultibase is not the public key of the secret key")
		}
		k.Public = pub
	}
	if k.Public == nil {
		return Key{}, malformed("the key file has neither publicKeyMultibase nor secretKeyMultibase")
	}
	k.DID = DID(k.Public)
	if kf.ID != "" && kf.ID != k.DID {
		return Key{}, malformed("the key file's id %q is not the key's DID %s", kf.ID, k.DID)
	}
	return k, nil
}

// ReadKeyFile reads the key file at path.
func ReadKeyFile(path string) (Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return Key{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return Key{}, fmt.Errorf("cannot read the key file %s: %w", path, err)
	}
	k, err := ParseKeyFile(data)
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// WriteKeyFile writes priv to a new key file at path, readable by its
// owner only (0600), creating its directory (0700) if needed. It never
// replaces a file: an existing one is an error wrapping os.ErrExist. The
// file appears whole or not at all (written aside, synced, then linked).
func WriteKeyFile(path string, priv ed25519.PrivateKey) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the key's directory: %w", err)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w (a key file is never overwritten)", path, os.ErrExist)
	}
	tmp, err := os.CreateTemp(dir, ".key-*.tmp")
	if err != nil {
		return fmt.Errorf("cannot write the key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write the key file: %w", err)
	}
	_, err = tmp.Write(MarshalKeyFile(priv))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot write the key file: %w", err)
	}
	// link fails if path exists, so two writers never replace each other.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s: %w (a key file is never overwritten)", path, os.ErrExist)
		}
		return fmt.Errorf("cannot write the key file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// LoadOrCreateKey reads the key file at path, or, when there is none,
// generates an Ed25519 key and writes it there (WriteKeyFile). created
// says which. A file without the secret key is an error.
func LoadOrCreateKey(path string) (priv ed25519.PrivateKey, created bool, err error) {
	k, err := ReadKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, false, fmt.Errorf("cannot generate a key: %w", err)
		}
		err = WriteKeyFile(path, priv)
		if errors.Is(err, os.ErrExist) { // another process was first
			k, err = ReadKeyFile(path)
		} else if err != nil {
			return nil, false, err
		} else {
			return priv, true, nil
		}
	}
	if err != nil {
		return nil, false, err
	}
	if k.Private == nil {
		return nil, false, fmt.Errorf("%s: %w: the key file has no secret key", path, ErrMalformed)
	}
	return k.Private, false, nil
}
