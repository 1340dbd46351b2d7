package replay

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestJobValidateRefusesFlagsThatDoNotGoTogether: every refusal is a
// UsageError naming the flag to fix, and a valid job parses its --set.
func TestJobValidateRefusesFlagsThatDoNotGoTogether(t *testing.T) {
	for _, tc := range []struct {
		job  Job
		want string // "" when valid
	}{
		{Job{LogPath: "a.log"}, "--config FILE is required"},
		{Job{ConfigPath: "c.yaml"}, "--log FILE is required"},
		{Job{ConfigPath: "c.yaml", PrintLogFormat: true}, ""},
		{Job{ConfigPath: "c.yaml", LogPath: "a.log", PrintLogToGiven: true}, "give both"},
		{Job{ConfigPath: "c.yaml", LogPath: "a.log", ReorderWindow: -time.Second}, "--reorder-window must be >= 0"},
		{Job{ConfigPath: "c.yaml", LogPath: "a.log", MaxCallers: -1}, "--max-callers must be >= 0"},
		{Job{ConfigPath: "c.yaml", LogPath: "a.log", Top: -1}, "--top must be >= 0"},
		{Job{ConfigPath: "c.yaml", LogPath: "-", Compare: true, Sets: []string{"p.capacity=3"}}, "give --log a file"},
		{Job{ConfigPath: "c.yaml", LogPath: "a.log", Compare: true}, "at least one --set"},
		{Job{ConfigPath: "c.yaml", LogPath: "a.log", Sets: []string{"p.cost=3"}}, `"cost" cannot be set`},
		{Job{ConfigPath: "c.yaml", LogPath: "a.log", Compare: true, Sets: []string{"p.capacity=3", "p.mode=shadow"}}, ""},
	} {
		err := tc.job.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.job, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, new(UsageError))):
			t.Errorf("%+v: error %v, want a UsageError containing %q", tc.job, err, tc.want)
		}
		if tc.want == "" && tc.job.Compare && len(tc.job.runs()) != 1+len(tc.job.Sets) {
			t.Errorf("%+v: %d runs, want the configuration and one per --set", tc.job, len(tc.job.runs()))
		}
	}
}
