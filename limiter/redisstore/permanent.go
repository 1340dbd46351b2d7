package redisstore

import (
	"errors"
	"strings"
)

// permanentErrors are the Redis replies that retrying cannot cure, each
// with the kind it is counted as and what the operator should change. A
// reply is matched by a fragment of its text, since go-redis hands them
// over as plain errors (redis.Error) and wrappers keep the text.
var permanentErrors = []struct {
	fragment, kind, fix string
}{
	{"NOAUTH", "noauth",
		"the Redis server requires a password: set store.redis.password_file or password_env (and store.redis.username for an ACL user)"},
	{"WRONGPASS", "wrongpass",
		"Redis refused the username or password: check store.redis.username and the secret in password_file / password_env (the ACL user may also be disabled)"},
	{"cluster support disabled", "cluster_disabled",
		"several store.redis.addresses (or cluster: true) mean a Redis Cluster, but this server is standalone: give one address for a standalone server (with sentinel_master for Sentinels)"},
	{"NOPERM", "noperm",
		"the Redis ACL user lacks a permission floodgate needs: grant it the commands +evalsha +eval +script|load +info +ping and the keys ~<prefix>* (e.g. ~fg:*)"},
	{"unknown command", "unknown_command",
		"the Redis server does not offer a command floodgate needs (renamed or disabled, or not Redis >= " + MinVersion + "): floodgate uses EVALSHA, EVAL, SCRIPT LOAD and INFO"},
	{"Unknown Redis command called from script", "unknown_command",
		"the Redis server refuses a command inside floodgate's script (renamed or disabled, or not Redis >= " + MinVersion + "): the script uses TIME, GET, SET, PEXPIRETIME and DEL"},
}

// Permanent reports whether err is one that retrying cannot cure (a
// missing or wrong password, a missing ACL permission, Cluster mode against
// a standalone server, a command the server refuses or an old server), with
// a kind to count it by and what to fix. Outages (timeouts, refused
// connections, a server loading or failing over) are not permanent.
func Permanent(err error) (kind, fix string, ok bool) {
	if err == nil {
		return "", "", false
	}
	if errors.Is(err, ErrNoAuth) {
		return "noauth", permanentErrors[0].fix, true
	}
	if errors.Is(err, ErrVersion) {
		return "version", "the Redis server is older than " + MinVersion + ", which floodgate's script needs (PEXPIRETIME): upgrade it", true
	}
	msg := err.Error()
	for _, p := range permanentErrors {
		if strings.Contains(msg, p.fragment) {
			return p.kind, p.fix, true
		}
	}
	return "", "", false
}
