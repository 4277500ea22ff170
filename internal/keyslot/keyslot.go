// Package keyslot computes Redis Cluster hash slots.
package keyslot

import "strings"

// Count is the number of hash slots in a Redis Cluster.
const Count = 16384

// Of returns the hash slot of key, as CLUSTER KEYSLOT computes it: CRC16
// (XMODEM) of the key, or of its hash tag — the part between the first '{'
// and the first '}' after it, when not empty — modulo Count.
func Of(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Count
}
