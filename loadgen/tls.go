package loadgen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
)

// SIPp's names for the certificate and key when -tls_cert and -tls_key are
// not given.
const (
	defaultTLSCert = "cacert.pem"
	defaultTLSKey  = "cakey.pem"
)

// tlsVersions maps -tls_version, as SIPp spells it, to crypto/tls.
var tlsVersions = map[string]uint16{
	"1.0": tls.VersionTLS10, "1": tls.VersionTLS10,
	"1.1": tls.VersionTLS11,
	"1.2": tls.VersionTLS12,
	"1.3": tls.VersionTLS13,
}

// tlsConfig is the configuration of -t l1, read as SIPp reads its flags:
// the certificate and key are sent to the peer (a server must have them; a
// client does without when none was named and SIPp's default files are
// absent); with -tls_ca the peer's certificate chain is checked against
// that CA and a server demands one from its clients, and without it
// nothing is checked. Like SIPp, a client checks the chain and not the
// name in it.
func (o *Options) tlsConfig(server bool, host string) (*tls.Config, error) {
	c := &tls.Config{}
	// A client that keeps its session, as SIPp's OpenSSL does: the server
	// then sends it a ticket, as it would to a phone.
	if !server {
		c.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	c.CurvePreferences, _ = tlsGroups(o.TLSGroups) // checked by defaults
	if o.TLSVersion != "" {
		v := tlsVersions[o.TLSVersion] // checked by defaults
		c.MinVersion, c.MaxVersion = v, v
	}
	certFile, keyFile := o.TLSCert, o.TLSKey
	named := certFile != "" || keyFile != ""
	if certFile == "" {
		certFile = defaultTLSCert
	}
	if keyFile == "" {
		keyFile = defaultTLSKey
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	switch {
	case err == nil:
		c.Certificates = []tls.Certificate{cert}
	case !server && !named && errors.Is(err, fs.ErrNotExist):
		// A client with no certificate of its own, which most servers take.
	case errors.Is(err, fs.ErrNotExist) && !named:
		return nil, fmt.Errorf("-t l1 as a server needs a certificate: -tls_cert and -tls_key (default %s and %s): %w", defaultTLSCert, defaultTLSKey, err)
	default:
		return nil, fmt.Errorf("-tls_cert %s, -tls_key %s: %w", certFile, keyFile, err)
	}
	if host != "" && net.ParseIP(host) == nil {
		c.ServerName = host // SNI, for a server that keeps several names
	}
	if o.TLSCA == "" {
		c.InsecureSkipVerify = true
		return c, nil
	}
	b, err := os.ReadFile(o.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("-tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("-tls_ca %s: no PEM certificate in it", o.TLSCA)
	}
	if server {
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		return c, nil
	}
	// The chain only, as SIPp: crypto/tls would also want the target's
	// name in the certificate, and load tests often dial an address the
	// certificate does not name.
	c.InsecureSkipVerify = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter})
		if err != nil {
			return fmt.Errorf("server certificate %q against -tls_ca %s: %w", cs.PeerCertificates[0].Subject.CommonName, o.TLSCA, err)
		}
		return nil
	}
	return c, nil
}

// transportName is the Via transport of a -t value.
func transportName(t string) string {
	switch t {
	case "t1":
		return "TCP"
	case "l1":
		return "TLS"
	}
	return "UDP"
}

// tlsGroupNames are -tls_groups' names of crypto/tls's key exchanges.
var tlsGroupNames = map[string]tls.CurveID{
	"x25519": tls.X25519, "p256": tls.CurveP256, "p384": tls.CurveP384, "p521": tls.CurveP521,
	"x25519mlkem768": tls.X25519MLKEM768,
}

// tlsGroups reads -tls_groups: nil for "" (crypto/tls's default, which
// offers a post-quantum hybrid first; a server without it, OpenSSL 3.0 for
// one, then takes another, so a comparison names one group for both).
func tlsGroups(s string) ([]tls.CurveID, error) {
	if s == "" {
		return nil, nil
	}
	var out []tls.CurveID
	for _, name := range strings.Split(s, ",") {
		id, ok := tlsGroupNames[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			return nil, fmt.Errorf("unknown group %q (want x25519, p256, p384, p521 or x25519mlkem768)", name)
		}
		out = append(out, id)
	}
	return out, nil
}
