package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// PKI is a certificate authority of the test's own and what it signs.
type PKI struct {
	t    testing.TB
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	Pool *x509.CertPool
}

// NewPKI makes a CA in a directory of the test's.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sipvisor test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &PKI{t: t, dir: t.TempDir(), ca: ca, key: key, Pool: x509.NewCertPool()}
	p.Pool.AddCert(ca)
	p.write("ca.pem", "CERTIFICATE", der)
	return p
}

func (p *PKI) write(name, typ string, der []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// Issue signs a certificate for 127.0.0.1 named cn and writes it and its
// key as NAME.pem and NAME.key.
func (p *PKI) Issue(name, cn string, serial int64) tls.Certificate {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	cert := p.write(name+".pem", "CERTIFICATE", der)
	keyPath := p.write(name+".key", "EC PRIVATE KEY", kder)
	c, err := tls.LoadX509KeyPair(cert, keyPath)
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// Path is a file the PKI wrote: ca.pem, NAME.pem, NAME.key.
func (p *PKI) Path(name string) string { return filepath.Join(p.dir, name) }

// DialTLS opens a TLS connection to the server's tls: socket, trusting the
// test's CA, and speaks SIP on it as TCPUA does.
func DialTLS(t testing.TB, pki *PKI, port int, conf *tls.Config) (*TCPUA, *tls.Conn, error) {
	t.Helper()
	if conf == nil {
		conf = &tls.Config{}
	}
	conf.RootCAs, conf.ServerName = pki.Pool, "127.0.0.1"
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), conf)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { c.Close() })
	return NewTCPUAOn(t, c, port, "TLS"), c, nil
}
