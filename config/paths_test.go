package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{certPath, "CERTIFICATE", der}, {keyPath, "EC PRIVATE KEY", kder}} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A relative path is relative to the directory of the file that names it,
// whatever the working directory: TLS files and the store alike.
func TestRelativePaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeCert(t, filepath.Join(dir, "conf", "tls", "cert.pem"), filepath.Join(dir, "conf", "tls", "key.pem"))
	inc := "tls_certificate = \"tls/cert.pem\"\ntls_private_key = \"tls/key.pem\"\nlocation_store = \"sqlite:db/location.db\"\n"
	if err := os.WriteFile(filepath.Join(dir, "conf", "tls.cfg"), []byte(inc), 0o644); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "main.cfg")
	if err := os.WriteFile(main, []byte("include_file \"conf/tls.cfg\"\nsocket = tls:127.0.0.1:0\nroute { exit; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "conf", "tls", "cert.pem"); c.TLS.Certificate != want {
		t.Errorf("tls_certificate: want %s, have %s", want, c.TLS.Certificate)
	}
	sp, err := c.Store()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "conf", "db", "location.db"); sp.Path != want {
		t.Errorf("location_store: want %s, have %s", want, sp.Path)
	}

	// Left at its default, the store is beside the main file.
	if err := os.WriteFile(main, []byte("socket = udp:127.0.0.1:0\nroute { exit; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err = LoadFile(main); err != nil {
		t.Fatal(err)
	}
	if sp, _ := c.Store(); sp.Path != filepath.Join(dir, "location.db") {
		t.Errorf("default location_store: want %s, have %s", filepath.Join(dir, "location.db"), sp.Path)
	}
}

// The built-in config has no file: its store is in the state directory,
// not in the directory sipvisor is run from. Not parallel: it sets the
// environment.
func TestBuiltinStoreInStateDir(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	sp, err := Default().Store()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(state, "sipvisor", "location.db"); sp.Path != want {
		t.Errorf("want %s, have %s", want, sp.Path)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", state)
	if sp, _ := Default().Store(); sp.Path != filepath.Join(state, ".local", "state", "sipvisor", "location.db") {
		t.Errorf("without XDG_STATE_HOME: want it under ~/.local/state/sipvisor, have %s", sp.Path)
	}
}
