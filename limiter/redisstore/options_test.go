package redisstore_test

import (
	"errors"
	"testing"

	"github.com/floodgate/floodgate/limiter/redisstore"
)

// TestValidateReportsEveryProblemByField: all of them at once, each an
// ErrOptions naming its field, so the config loader can put each at its line.
func TestValidateReportsEveryProblemByField(t *testing.T) {
	err := redisstore.Options{
		Addresses: []string{"127.0.0.1:0", "a:1", "a:1"},
		Username:  "app",
		Prefix:    "fg{x}:",
		TLS:       &redisstore.TLSOptions{KeyFile: "k.pem"},
	}.Validate()
	var fes redisstore.FieldErrors
	if !errors.As(err, &fes) || !errors.Is(err, redisstore.ErrOptions) {
		t.Fatalf("Validate = %v, want FieldErrors wrapping ErrOptions", err)
	}
	var fields []string
	for _, fe := range fes {
		fields = append(fields, fe.Field)
	}
	want := []string{"Addresses[0]", "Addresses[2]", "Username", "Prefix", "TLS.CertFile"}
	if len(fields) != len(want) {
		t.Fatalf("fields %q, want %q\n%v", fields, want, err)
	}
	for i := range want {
		if fields[i] != want[i] {
			t.Errorf("field %d is %s, want %s", i, fields[i], want[i])
		}
	}
	if err := (redisstore.Options{Addresses: []string{"127.0.0.1:6379"}}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}
