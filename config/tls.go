package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLS is the tls_* settings.
type TLS struct {
	Certificate  string `json:"certificate,omitempty"`
	PrivateKey   string `json:"private_key,omitempty"`
	CAList       string `json:"ca_list,omitempty"`
	VerifyClient bool   `json:"verify_client"`
	VerifyServer bool   `json:"verify_server"`
}

// MinTLSVersion is the oldest TLS spoken: 1.0 and 1.1 are deprecated
// (RFC 8996).
const MinTLSVersion = tls.VersionTLS12

// ServerConfig is the configuration tls: and wss: sockets accept
// connections with:
// the certificate read now, and client certificates verified when
// VerifyClient is set.
func (t TLS) ServerConfig() (*tls.Config, error) {
	if t.Certificate == "" || t.PrivateKey == "" {
		return nil, errors.New("a tls: or wss: socket needs tls_certificate and tls_private_key")
	}
	cert, err := tls.LoadX509KeyPair(t.Certificate, t.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("tls_certificate %s, tls_private_key %s: %w", t.Certificate, t.PrivateKey, err)
	}
	c := &tls.Config{MinVersion: MinTLSVersion, Certificates: []tls.Certificate{cert}}
	if t.VerifyClient {
		pool, err := t.caPool()
		if err != nil {
			return nil, err
		}
		if pool == nil {
			return nil, errors.New("tls_verify_client needs tls_ca_list: the authorities client certificates are checked against")
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// ClientConfig is the configuration connections to TLS next hops are
// opened with: the same certificate, when there is one, for a next hop
// that asks for it.
func (t TLS) ClientConfig() (*tls.Config, error) {
	c := &tls.Config{MinVersion: MinTLSVersion, InsecureSkipVerify: !t.VerifyServer}
	if t.Certificate != "" && t.PrivateKey != "" {
		cert, err := tls.LoadX509KeyPair(t.Certificate, t.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("tls_certificate %s, tls_private_key %s: %w", t.Certificate, t.PrivateKey, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	pool, err := t.caPool()
	if err != nil {
		return nil, err
	}
	c.RootCAs = pool // nil: the system's roots
	return c, nil
}

func (t TLS) caPool() (*x509.CertPool, error) {
	if t.CAList == "" {
		return nil, nil
	}
	b, err := os.ReadFile(t.CAList)
	if err != nil {
		return nil, fmt.Errorf("tls_ca_list: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls_ca_list %s: no PEM certificate in it", t.CAList)
	}
	return pool, nil
}
