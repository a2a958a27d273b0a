-- Forgets a key's state: every key of one client, all in one slot.
return redis.call('DEL', unpack(KEYS))
