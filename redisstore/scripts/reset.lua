-- Forgets a client's state: all its keys, which share one slot. The reply
-- is an array, like every script's, so that one Scripter method reads them
-- all.
return {redis.call('DEL', unpack(KEYS))}
