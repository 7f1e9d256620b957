-- The guaranteed tokens/s of one org in force at an instant (_guarantee.lua). Reads only.
--
-- KEYS (K): GuaranteeKeys; ARGV (A): GuaranteeArgs; reply: Guarantee (quotas/limiter/schema.py).
local output, input = org_guarantee_at(K.org, tonumber(A.now_ms))
return reply{output_tps = output, input_tps = input}
