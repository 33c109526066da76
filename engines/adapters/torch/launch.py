"""The run-id agreement through torchrun's key-value store (``engines.launch`` decides when to ask).

torchrun's elastic agent hosts a ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT`` for the whole launch and tells its
workers so (``TORCHELASTIC_USE_AGENT_STORE=True``); ``init_process_group`` connects to it as a client, and so do
we, once, before the target runs. ``compare_set(key, "", proposal)`` stores the proposal when the key is new and
returns whatever the key holds: the first rank's proposal, for every rank.
"""

import datetime

CONNECT_TIMEOUT_S = 60


def agree_run_id(host: str, port: int, key: str, proposal: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    from torch.distributed import TCPStore

    store = TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s),
                     wait_for_workers=False)
    agreed = store.compare_set(key, "", proposal)
    return agreed.decode() if isinstance(agreed, bytes) else str(agreed)
