"""WhatsApp Business (DESIGN.md section 16): the Graph API client, the accounts tenants link
and the numbers imported from them, and the call permissions Meta requires."""
