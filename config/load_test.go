package config

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expectations of golden files and docs/CONFIG.md")

const dashes = "\n----------\n"

// goldenOutput is what a .cfgtest file expects below its dashes: the Config as
// indented JSON, or one error per line.
func goldenOutput(name string, src []byte) string {
	c, err := Load(name, src)
	if err != nil {
		return err.Error() + "\n"
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return "marshal: " + err.Error() + "\n"
	}
	return b.String()
}

func goldenFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join("testdata", "*.cfgtest"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	return files
}

func splitGolden(t testing.TB, path string) (cfg, want string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, want, ok := strings.Cut(string(raw), dashes)
	if !ok {
		t.Fatalf("%s: no line of ten dashes", path)
	}
	return cfg + "\n", want
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for _, path := range goldenFiles(t) {
		base := strings.TrimSuffix(filepath.Base(path), ".cfgtest")
		t.Run(base, func(t *testing.T) {
			cfg, want := splitGolden(t, path)
			have := goldenOutput(filepath.Join("testdata", base+".cfg"), []byte(cfg))
			if *update {
				out := strings.TrimSuffix(cfg, "\n") + dashes + have
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if have != want {
				t.Errorf("want\n%s\nhave\n%s", want, have)
			}
			// Cases named ok_* must load and the others must fail, so that an
			// -update cannot quietly turn a rule off.
			isErr := !strings.HasPrefix(have, "{")
			if strings.HasPrefix(base, "ok_") == isErr {
				t.Errorf("want ok_ cases to load and others to fail; have %s", strings.SplitN(have, "\n", 2)[0])
			}
		})
	}
}

// TestErrorsArePositioned checks that every problem comes out as an *Error
// with a real position, whatever combination of them a file holds.
func TestErrorsArePositioned(t *testing.T) {
	t.Parallel()
	for _, path := range goldenFiles(t) {
		base := strings.TrimSuffix(filepath.Base(path), ".cfgtest")
		cfg, _ := splitGolden(t, path)
		_, err := Load(filepath.Join("testdata", base+".cfg"), []byte(cfg))
		if err == nil {
			continue
		}
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			var ce *Error
			if !errors.As(e, &ce) || ce.Pos.Line < 1 || ce.Pos.Col < 1 || ce.Pos.File == "" {
				t.Errorf("%s: want a positioned *Error, have %#v", base, e)
			}
		}
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()
	c := Default()
	if len(c.Sockets) != 2 || c.Sockets[0].Proto != "udp" || c.Sockets[1].Proto != "tcp" {
		t.Errorf("want udp and tcp sockets, have %+v", c.Sockets)
	}
	for _, s := range c.Sockets {
		if s.Host != "127.0.0.1" || s.Port != 5060 {
			t.Errorf("want 127.0.0.1:5060, have %s:%d", s.Host, s.Port)
		}
	}
	if c.HTTPListen != "127.0.0.1:8888" {
		t.Errorf("want http_listen 127.0.0.1:8888, have %v", c.HTTPListen)
	}
	if c.UDPWorkers.Profile == "" || c.TCPWorkers.Profile == "" {
		t.Errorf("want a default scaling profile on udp and tcp, have %+v %+v", c.UDPWorkers, c.TCPWorkers)
	}
	if c.Script.Routes[""] == nil {
		t.Errorf("want a main route")
	}
	if c.File != DefaultName {
		t.Errorf("want File %q, have %q", DefaultName, c.File)
	}
}

// TestExamples loads every config in examples/, so the files users copy from
// cannot rot.
func TestExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.cfg"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// An example with a tls: or wss: socket names certificate files
			// the user makes; a test pair stands in for them.
			if bytes.Contains(src, []byte("\ntls_certificate = ")) {
				cert, key := testCertificate(t)
				src = regexp.MustCompile(`(?m)^tls_certificate = ".*"$`).ReplaceAll(src, []byte(`tls_certificate = "`+cert+`"`))
				src = regexp.MustCompile(`(?m)^tls_private_key = ".*"$`).ReplaceAll(src, []byte(`tls_private_key = "`+key+`"`))
			}
			if _, err := Load(f, src); err != nil {
				t.Errorf("want no error, have\n%v", err)
			}
		})
	}
}

// testCertificate writes a self-signed ECDSA P-256 certificate for
// 127.0.0.1 and its key, and returns their paths.
func testCertificate(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestExampleDefaultMatches keeps examples/default.cfg the same config as the
// built-in one, comments aside.
func TestExampleDefaultMatches(t *testing.T) {
	t.Parallel()
	ex, err := LoadFile(filepath.Join("..", "examples", "default.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	ex.Script, def.Script = nil, nil // positions differ with the comments
	a, _ := json.Marshal(ex)
	b, _ := json.Marshal(def)
	if !bytes.Equal(a, b) {
		t.Errorf("want examples/default.cfg to load as the built-in config\nwant %s\nhave %s", b, a)
	}
}

func TestLoadFileMissing(t *testing.T) {
	t.Parallel()
	_, err := LoadFile(filepath.Join(t.TempDir(), "nope.cfg"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("want os.ErrNotExist, have %v", err)
	}
}

// TestIncludeNotRegular refuses devices and directories, which would hang or
// exhaust memory rather than fail.
func TestIncludeNotRegular(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"/dev/zero", t.TempDir()} {
		src := "include_file \"" + target + "\"\n"
		_, err := Load(filepath.Join(t.TempDir(), "main.cfg"), []byte(src))
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: want a not a regular file error, have %v", target, err)
		}
	}
}

func TestSettingDefaultsParse(t *testing.T) {
	t.Parallel()
	for _, s := range settings {
		if s.Default == "" {
			continue
		}
		if s.set == nil && s.Kind != kindGroup {
			t.Errorf("%s: a default without a setter", s.Name)
		}
		if s.set != nil {
			if _, err := s.parse(s.Default); err != nil {
				t.Errorf("%s: default %q: %v", s.Name, s.Default, err)
			}
		}
	}
}

func TestDidYouMean(t *testing.T) {
	t.Parallel()
	names := []string{"udp_workers", "tcp_workers", "timer_workers", "log_level"}
	for _, tc := range []struct{ word, want string }{
		{"udp_worker", "udp_workers"},
		{"tpc_workers", "tcp_workers"},
		{"loglevel", "log_level"},
		{"frobnicate", ""},
		{"", ""},
	} {
		if have := didYouMean(tc.word, names); have != tc.want {
			t.Errorf("%q: want %q, have %q", tc.word, tc.want, have)
		}
	}
}

func TestUnquote(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`"a\"b"`, `a"b`},
		{`"^\+1"`, `^\+1`},
		{`"x\r\n"`, "x\r\n"},
		{`'a\b'`, `a\b`},
		{`bare`, `bare`},
	} {
		if have := unquote(tc.in); have != tc.want {
			t.Errorf("%s: want %q, have %q", tc.in, tc.want, have)
		}
	}
}

func TestTooManyErrors(t *testing.T) {
	t.Parallel()
	src := strings.Repeat("x = 1\n", maxErrors+50)
	_, err := Load("many.cfg", []byte(src))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 {
		t.Fatalf("want %d lines, have %d", maxErrors+1, len(lines))
	}
	if want := "many.cfg:101:1: too many errors; stopping here"; lines[maxErrors] != want {
		t.Errorf("want %q, have %q", want, lines[maxErrors])
	}
}

// Not parallel: it swaps the package's DefaultText, which other tests read.
func TestDefaultPanicsOnBrokenText(t *testing.T) {
	saved := DefaultText
	t.Cleanup(func() { DefaultText = saved })
	DefaultText = "udp_workers = many\n"
	defer func() {
		r := recover()
		msg, _ := r.(string)
		if !strings.Contains(msg, "<default>:1:15") {
			t.Errorf("want a panic naming the position, have %v", r)
		}
	}()
	Default()
}
