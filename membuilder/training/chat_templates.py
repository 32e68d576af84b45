"""Chat templates for assistant-only loss.

TRL's ``assistant_only_loss`` masks everything but the text between ``{% generation %}`` and
``{% endgeneration %}``. TRL carries training templates for the families it knows (Qwen2.5/3,
Llama 3, Gemma, Phi, ...); SmolLM2 uses plain ChatML without markers, so we supply the same
ChatML with the markers around each assistant reply and its ``<|im_end|>`` (so the model learns
to stop). The markers render to nothing, so prompts are byte-identical to the original.
"""

from __future__ import annotations

CHATML_TRAINING = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def has_generation_markers(template: str | None) -> bool:
    return bool(template) and "{% generation %}" in template.replace("{%-", "{%").replace("-%}", "%}")


def ensure_generation_markers(tokenizer) -> str:
    """Make ``tokenizer`` ready for assistant-only loss; return which template it now uses.

    ``"own"``: its template already has markers. ``"trl"``: TRL will swap in its training
    template for this family. ``"chatml"``: we installed ``CHATML_TRAINING``. Anything else is
    an error that names the fix (``chat_template_path`` in the SFT config).
    """
    template = tokenizer.chat_template
    if has_generation_markers(template):
        return "own"
    try:
        from trl.chat_template_utils import get_training_chat_template

        if get_training_chat_template(tokenizer):
            return "trl"
    except (ValueError, KeyError, ImportError):
        pass
    if template is None or "<|im_start|>" in template:
        tokenizer.chat_template = CHATML_TRAINING
        return "chatml"
    raise ValueError("the tokenizer's chat template has no {% generation %} markers and is not ChatML; give a "
                     "template with markers through `chat_template_path`, or set assistant_only_loss: false")
