package redisstore

import "strings"

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key's hash tag, modulo 16384. The hash tag is the part between the first
// '{' and the first '}' after it, when that part is not empty; otherwise the
// whole key is hashed. This is the cluster specification's algorithm (the one
// go-redis keeps in an internal package); tests check it against the
// server's CLUSTER KEYSLOT.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^key[k]]
	}
	return int(crc) & (Slots - 1)
}

// crc16tab is the table of CRC16-CCITT (XMODEM: polynomial 0x1021, initial
// value 0, no reflection), built once.
var crc16tab = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
