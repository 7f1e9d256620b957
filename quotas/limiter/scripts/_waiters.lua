-- The pool's admission queue (admission/engine/queue.py) waits for capacity: a script that
-- frees some (refunds, freed slots) tells the pool's waiters, if any.
local function waiters_tell(now_ms)
  if redis.call('EXISTS', PREFIX .. ':' .. KEY.queue_orgs) == 1 then
    redis.call('PUBLISH', PREFIX .. ':' .. KEY.queue_channel, now_ms)
  end
end
