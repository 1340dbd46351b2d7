package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate/floodgate/internal/config"
)

// tlsSource serves the listener's TLS configuration, re-reading the
// certificate, key and client CA when their files change (checked at most
// once a second, at handshakes), so rotated certificates need no restart. A
// broken rotation is logged and the previous files keep serving.
type tlsSource struct {
	spec config.ListenTLS
	log  *zap.Logger

	mu      sync.Mutex
	cfg     *tls.Config
	stamps  [3]time.Time // modification times of cert, key, CA
	checked time.Time
}

func newTLSSource(spec config.ListenTLS, log *zap.Logger) (*tlsSource, error) {
	s := &tlsSource{spec: spec, log: log}
	cfg, stamps, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cfg, s.stamps, s.checked = cfg, stamps, time.Now()
	return s, nil
}

// credentials returns gRPC transport credentials backed by s.
func (s *tlsSource) credentials() credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.current(), nil },
	})
}

func (s *tlsSource) current() *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < time.Second {
		return s.cfg
	}
	s.checked = time.Now()
	if st := s.modTimes(); st == s.stamps {
		return s.cfg
	}
	cfg, stamps, err := s.load()
	if err != nil {
		s.log.Error("TLS files changed but do not load; the previous certificate keeps serving", zap.Error(err))
		return s.cfg
	}
	s.cfg, s.stamps = cfg, stamps
	s.log.Info("TLS certificate reloaded", zap.String("cert_file", s.spec.CertFile))
	return cfg
}

func (s *tlsSource) modTimes() [3]time.Time {
	var st [3]time.Time
	for i, f := range []string{s.spec.CertFile, s.spec.KeyFile, s.spec.ClientCAFile} {
		if fi, err := os.Stat(f); err == nil && f != "" {
			st[i] = fi.ModTime()
		}
	}
	return st
}

func (s *tlsSource) load() (*tls.Config, [3]time.Time, error) {
	stamps := s.modTimes()
	cert, err := tls.LoadX509KeyPair(s.spec.CertFile, s.spec.KeyFile)
	if err != nil {
		return nil, stamps, fmt.Errorf("listen.tls: certificate %s / key %s: %w", s.spec.CertFile, s.spec.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2"},
	}
	if s.spec.ClientCAFile != "" {
		pem, err := os.ReadFile(s.spec.ClientCAFile)
		if err != nil {
			return nil, stamps, fmt.Errorf("listen.tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, stamps, fmt.Errorf("listen.tls.client_ca_file %s: no PEM certificate in it", s.spec.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if allowed := s.spec.AllowedSANs; len(allowed) > 0 {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error { return checkSANs(cs, allowed) }
		}
	}
	return cfg, stamps, nil
}

// checkSANs admits a client whose certificate names one of allowed as a
// URI SAN (e.g. a SPIFFE ID) or a DNS SAN.
func checkSANs(cs tls.ConnectionState, allowed []string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	for _, a := range allowed {
		for _, u := range leaf.URIs {
			if u.String() == a {
				return nil
			}
		}
		for _, d := range leaf.DNSNames {
			if d == a {
				return nil
			}
		}
	}
	return fmt.Errorf("client certificate %q is not in listen.tls.allowed_sans", leaf.Subject.CommonName)
}
